use clap::{Parser, Subcommand};
use hmdp::{Config, startup};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(name = "hmdp", version, about = "Voucher flash-sale backend")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    config: Config,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the default).
    Serve,
    /// Create logged-in users for a load test, straight into MariaDB and
    /// Redis (the same session format as login), and write their tokens as
    /// CSV: `userId,phone,token`.
    SeedUsers {
        #[arg(long)]
        count: u64,
        #[arg(long, default_value = "tokens.csv")]
        out: std::path::PathBuf,
        /// Phones are first-phone, first-phone + 1, ...
        #[arg(long, default_value_t = 17_000_000_000)]
        first_phone: u64,
    },
    /// Asynchronous mode: compare Redis (stock, buyers) with MariaDB (stock,
    /// orders) for a drained voucher, or every active one; exits non-zero on
    /// drift or when a stream is not drained.
    Reconcile {
        #[arg(long)]
        voucher: Option<u64>,
    },
    /// Run every classic seckill strategy and lock pitfall side by side on
    /// the same requests, each on a fresh voucher, and audit the tables
    /// after each; exits non-zero when a strategy did not behave as it is
    /// known to (a correct one broke, or a broken one did not break).
    Lab(hmdp::lab::LabOptions),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let app = startup::Application::build(cli.config).await?;
            app.run_until(startup::shutdown_signal()).await
        }
        Command::SeedUsers { count, out, first_phone } => seed_users(cli.config, count, &out, first_phone).await,
        Command::Reconcile { voucher } => reconcile(cli.config, voucher).await,
        Command::Lab(options) => lab(cli.config, options).await,
    }
}

async fn lab(config: Config, options: hmdp::lab::LabOptions) -> anyhow::Result<()> {
    config.validate()?;
    let report = hmdp::lab::run(&config, &options).await?;
    if options.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.markdown());
    }
    if let Some(path) = &options.save_json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    if let Some(path) = &options.chart {
        std::fs::write(path, hmdp::lab::render_svg(&report)?)?;
        eprintln!("chart written to {}", path.display());
    }
    let unexpected = report.unexpected();
    for line in &unexpected {
        eprintln!("UNEXPECTED: {line}");
    }
    anyhow::ensure!(
        unexpected.is_empty(),
        "{} result(s) contradict what the strategy is known to do",
        unexpected.len()
    );
    Ok(())
}

async fn reconcile(config: Config, voucher: Option<u64>) -> anyhow::Result<()> {
    use redis::AsyncCommands;
    // Reads only: no migrations, no session secrets.
    let db = startup::connect_database(&config.database_url, 2).await?;
    let mut redis = startup::connect_redis(&config.redis_url).await?;
    let keys = hmdp::keys::Keys::new(&config.redis_key_prefix);
    let vouchers: Vec<u64> = match voucher {
        Some(id) => vec![id],
        None => redis.smembers(keys.seckill_active()).await?,
    };
    let mut drift = 0;
    for voucher in vouchers {
        let report = hmdp::seckill::reconcile(&db, &mut redis, &keys, voucher).await?;
        print!("{}", report.render());
        if !report.agrees() {
            drift += 1;
        }
    }
    anyhow::ensure!(drift == 0, "{drift} voucher(s) not drained or with drift");
    Ok(())
}

async fn seed_users(config: Config, count: u64, out: &std::path::Path, first_phone: u64) -> anyhow::Result<()> {
    use std::io::Write;
    config.validate()?;
    let started = std::time::Instant::now();
    let state = startup::build_state(config).await?;
    let users = hmdp::auth::seed_users(&state.db, &state.auth.sessions, &state.auth.tokens, first_phone, count).await?;
    let mut file = std::io::BufWriter::new(std::fs::File::create(out)?);
    writeln!(file, "userId,phone,token")?;
    for user in &users {
        writeln!(file, "{},{},{}", user.id, user.phone, user.token)?;
    }
    file.flush()?;
    eprintln!("seeded {} users in {:.1?}; tokens in {}", users.len(), started.elapsed(), out.display());
    Ok(())
}
