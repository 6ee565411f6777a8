//! loadgen: drives routerd over PROTOCOL.md and measures it honestly.

mod cli;
mod clock;
mod conn;
mod stats;
mod workload;

fn main() {}
