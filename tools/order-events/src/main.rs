//! A downstream consumer of hmdp's order events, the one docs/events.md
//! describes: `consume` subscribes durably to the ORDERS stream and applies
//! each event once through an inbox table; `report` prints what it has
//! seen; `audit` holds it against the orders of some vouchers.

use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use order_events::{audit, consume, inbox};

const DEFAULT_EVENTS_DATABASE_URL: &str = "mysql://root@127.0.0.1:3306/hmdp_downstream";

#[derive(Parser)]
#[command(about = "A downstream consumer of hmdp's order events (NATS JetStream)")]
struct Cli {
    /// The consumer's own database (created when missing): its inbox and
    /// the order view the events build.
    #[arg(long, env = "EVENTS_DATABASE_URL", default_value = DEFAULT_EVENTS_DATABASE_URL, global = true)]
    events_database_url: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Subscribes (durably) and applies every event once, until killed or
    /// idle for `--idle-exit-ms`; prints what this run applied.
    Consume {
        #[command(flatten)]
        broker: consume::Broker,
        /// The durable consumer's name: a second run with the same name
        /// goes on where the first stopped.
        #[arg(long, default_value = "order-events")]
        durable: String,
        #[arg(long)]
        idle_exit_ms: Option<u64>,
        /// A new durable starts at the first event stored at or after this
        /// time (Unix ms), not the stream's first: a run's own events.
        #[arg(long)]
        since_ms: Option<i64>,
    },
    /// What the consumer has applied in all, as JSON.
    Report,
    /// Every order of these vouchers has its events, each once, in order,
    /// and no event names an order without a row (but a `failed` one);
    /// waits up to `--wait-ms` for the consumer to catch up. Exit status 1
    /// when it fails.
    Audit {
        /// Where the orders are.
        #[arg(long, env = "DATABASE_URL", default_value = "mysql://root@127.0.0.1:3306/hmdp")]
        database_url: String,
        #[arg(long = "voucher", required = true)]
        vouchers: Vec<u64>,
        #[arg(long, default_value_t = 10_000)]
        wait_ms: u64,
        /// Also write the result as JSON here.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let downstream = hmdp::startup::connect_database(&cli.events_database_url, 4).await?;
    inbox::create_tables(&downstream).await?;
    match cli.command {
        Command::Consume { broker, durable, idle_exit_ms, since_ms } => {
            let idle_exit = idle_exit_ms.map(Duration::from_millis);
            let options = consume::Options { broker, durable, idle_exit, since_ms };
            let run = consume::consume(&downstream, &options).await?;
            println!("{}", serde_json::to_string(&run)?);
        }
        Command::Report => println!("{}", serde_json::to_string_pretty(&inbox::seen(&downstream).await?)?),
        Command::Audit { database_url, vouchers, wait_ms, json } => {
            let orders = hmdp::startup::connect_database(&database_url, 4).await?;
            let started = Instant::now();
            let audit = loop {
                let audit = audit::EventsAudit::run(&orders, &downstream, &vouchers).await?;
                if audit.passed || started.elapsed() >= Duration::from_millis(wait_ms) {
                    break audit;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            };
            print!("{}", audit.render());
            if let Some(path) = json {
                std::fs::write(path, serde_json::to_string_pretty(&audit)?)?;
            }
            if !audit.passed {
                std::process::exit(1);
            }
        }
    }
    Ok(())
}
