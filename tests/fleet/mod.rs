//! The redis-server of the tests of `drip take` and `--share-jobs`: the
//! common one ([`RedisServer`](super::common::redis_server::RedisServer)),
//! by the name these tests know it.

pub use super::common::redis_server::RedisServer as Redis;
