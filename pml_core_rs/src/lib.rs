//! pml core: the hot loops of the pml server, in plain Rust.
//!
//! Everything here is pure computation over strings, bytes and float arrays: no I/O, no
//! Python types. The Python bindings live in one module, `python/` (one file per domain),
//! compiled only with the `python` feature (maturin turns it on), so `cargo test` needs no
//! interpreter.

pub mod error;
pub mod hashing;
pub mod index;
pub mod lexical;
pub mod normalize;
pub mod ranking;
pub mod tool_names;

#[cfg(feature = "python")]
mod python;

pub use error::CoreError;
