//! Models shipped with the checker: a key-value store partitioned per key, and a single
//! register with compare-and-set.

mod kv;
mod register;

pub use kv::{KvInput, KvModel, KvOutput};
pub use register::{RegisterInput, RegisterModel, RegisterOutput};
