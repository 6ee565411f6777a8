//! Thread-per-core runtime.
