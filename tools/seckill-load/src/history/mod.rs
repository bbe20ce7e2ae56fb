//! A history of every request a sale sent (`--history FILE`), and a checker
//! that reads it against the tables afterwards (`seckill-load
//! check-history`). The history is what the clients were told, one JSON
//! line each, kept on disk: a run's verdict can be worked out again, by
//! another tool, after the stack is gone. The checker holds each answer to
//! the rows: a 200 must have its row, a 202 may have lost it (its answer
//! said so), and an answer that settled nothing (503, 502, 504, no answer
//! at all) leaves the order either there or not, which the checker finds
//! out for each.
//!
//! The file: a first line `{"sale": Header}`, then one `Entry` a line.

mod check;
mod file;
mod judge;
#[cfg(test)]
mod tests;

pub use check::{CheckArgs, check};
pub use file::{Entry, Header, VoucherBefore, write};
