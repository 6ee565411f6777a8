//! The command line's own code, beside the node it drives: [`ctl`] (the
//! admin endpoint's cluster operations: `cluster status`, `transfer`,
//! `drain`), [`rebalance`] (`routerd rebalance`), [`scripts`] (`routerd
//! scripts reload`) and [`client`]
//! (`routerd client`, a line-oriented client to try a node with).
//! `src/main.rs` parses the arguments and calls these.

pub mod client;
pub mod ctl;
pub mod rebalance;
pub mod scripts;
