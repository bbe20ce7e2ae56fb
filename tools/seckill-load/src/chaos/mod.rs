//! A chaos run: the sale under one fault. The fault itself is injected by a
//! command the caller names (`scripts/chaos` keeps the injectors and the
//! stack, which are shell work); everything else is here: when the fault
//! lands, whether every instance serves again and sells a fresh order, the
//! lock holds lost, and the verdict on the run, strict as the table has
//! always been. A run counts only when its fault showed it happened, and a
//! sale that ended before its fault proves nothing.

mod args;
mod injection;
mod probe;
mod verdict;

pub use args::ChaosArgs;
pub use injection::{Injection, inject};
pub use probe::{locks_lost, orders_again};
pub use verdict::Run;
