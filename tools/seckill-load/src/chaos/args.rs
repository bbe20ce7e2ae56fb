//! What a chaos run is told: the fault, when, and the instances to watch.

use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct ChaosArgs {
    /// A chaos run: the fault's name, for the table and its rules
    /// (`instance-kill` may lose the answers of the process it kills, a
    /// `-nowait` fault the orders no replica acknowledged).
    #[arg(long)]
    pub fault: Option<String>,
    /// The command that injects the fault, run through `sh -c` this many
    /// seconds after the first request (`--fault-at`); it exits 0 when the
    /// fault happened, and what it prints shows it.
    #[arg(long, requires = "fault")]
    pub inject: Option<String>,
    #[arg(long, default_value_t = 1.5)]
    pub fault_at: f64,
    /// The seckill mode the stack runs in, for the table and the Redis check.
    #[arg(long, default_value = "sync")]
    pub mode: String,
    /// The instances that must serve again after the fault (host:port).
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:8081,127.0.0.1:8082")]
    pub instances: Vec<String>,
    /// The run's row is appended to this Markdown table, and what it found
    /// wrong to this file.
    #[arg(long)]
    pub table: Option<PathBuf>,
    #[arg(long)]
    pub problems: Option<PathBuf>,
}
