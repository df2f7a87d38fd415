//! Verdicts with known answers: hand-made histories, and generated ones judged by a brute-force
//! checker written apart from the crate's search.

mod brute;
mod generated;
mod hand;
