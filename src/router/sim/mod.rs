//! The deterministic simulator: several nodes of real `RouterCore`s, a fake
//! clock, a fake store with faults and a fake network, driven by one seed.

pub mod counter;
