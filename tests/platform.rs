//! The platform module (`src/platform/`) is the one place that names the
//! calls only Linux has: no other source file reads `/proc`, opens a
//! pidfd, writes with pwritev2(2), makes a pipe with pipe2(2) or asks for
//! `SO_PEERCRED`, so a build for macOS or FreeBSD meets them nowhere else.

use std::path::Path;

use crate::common;

/// The calls (as code spells them, not as prose does) that only the
/// platform module may make.
const LINUX_ONLY: [&str; 8] = [
    "\"/proc",
    "pidfd_open(",
    "PidfdFlags",
    "pwritev2(",
    "pipe2(",
    "pipe_with(",
    "socket_peercred(",
    "::SO_PEERCRED",
];

#[test]
fn linux_only_calls_are_made_in_the_platform_module_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let platform = root.join("src/platform");
    let mut files = Vec::new();
    common::sources(&root.join("src"), &mut files);
    assert!(files.len() > 50, "{} source files", files.len());
    let mut found = Vec::new();
    for file in files.iter().filter(|f| !f.starts_with(&platform)) {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for call in LINUX_ONLY.iter().filter(|c| line.contains(*c)) {
                let file = file.strip_prefix(root).unwrap().display();
                found.push(format!("{file}:{}: {call}", n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "Linux-only calls outside src/platform/:\n{}",
        found.join("\n")
    );
    // The module makes them, so the check looks for what is there.
    let mut own = Vec::new();
    common::sources(&platform, &mut own);
    let text: String = own
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    for call in [
        "\"/proc",
        "pidfd_open(",
        "pwritev2(",
        "pipe_with(",
        "socket_peercred(",
    ] {
        assert!(text.contains(call), "src/platform/ makes no {call}");
    }
}
