//! Benchmarks live in `benches/` and the whole-system scripts beside this crate.
