use clap::{Parser, Subcommand};
use hmdp::{
    Config,
    auth::{SessionStore, TokenKeys},
    config::{AuthSettings, DEFAULT_LOG_FILTER, DatabaseSettings, DatabaseUrl, RedisSettings, settings_table},
    keys::Keys,
    startup,
};
use tracing_subscriber::EnvFilter;

/// A request allocates and frees many small buffers (headers, JSON, Redis
/// replies) across the runtime's threads; glibc's allocator spent about a
/// fifth of an instance's CPU on them under load. mimalloc's thread-local
/// free lists make that cost small (measured with `scripts/bench-cpu`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "hmdp", version, about = "Voucher flash-sale backend")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Each subcommand demands only the settings it uses.
#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the default).
    Serve(Box<Config>),
    /// Create logged-in users for a load test, straight into MariaDB and
    /// Redis (the same session format as login), and write their tokens as
    /// CSV: `userId,phone,token`.
    SeedUsers {
        #[command(flatten)]
        db: DatabaseSettings,
        #[command(flatten)]
        redis: RedisSettings,
        #[command(flatten)]
        auth: AuthSettings,
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
        #[command(flatten)]
        db: DatabaseUrl,
        #[command(flatten)]
        redis: RedisSettings,
        #[arg(long)]
        voucher: Option<u64>,
    },
    /// Print every setting `serve` reads (its variable, default and
    /// meaning) as the Markdown table of docs/api.md.
    Settings,
}

const SUBCOMMANDS: [&str; 5] = ["serve", "seed-users", "reconcile", "settings", "help"];

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| DEFAULT_LOG_FILTER.into()))
        .init();
    #[cfg(feature = "failpoints")]
    hmdp_segments::fail_points_from_env();
    let cli = Cli::parse_from(with_default_subcommand(std::env::args().collect()));
    match cli.command {
        Command::Serve(config) => {
            let descriptors = startup::raise_descriptor_limit();
            let (max_in_flight, max_working) = (config.server.max_in_flight, config.server.max_working);
            tracing::info!(descriptors, max_in_flight, max_working, "limits");
            let app = startup::Application::build(*config).await?;
            app.run_until(startup::shutdown_signal()).await
        }
        Command::SeedUsers { db, redis, auth, count, out, first_phone } => {
            seed_users(&db, &redis, &auth, count, &out, first_phone).await
        }
        Command::Reconcile { db, redis, voucher } => reconcile(&db, &redis, voucher).await,
        Command::Settings => {
            print!("{}", settings_table());
            Ok(())
        }
    }
}

/// `hmdp` alone, or with serve's flags only, serves.
fn with_default_subcommand(mut args: Vec<String>) -> Vec<String> {
    let first = args.get(1).map(String::as_str);
    let names_one = first.is_some_and(|a| SUBCOMMANDS.contains(&a) || ["-h", "--help", "-V", "--version"].contains(&a));
    if !names_one {
        args.insert(1.min(args.len()), "serve".into());
    }
    args
}

async fn reconcile(db: &DatabaseUrl, redis: &RedisSettings, voucher: Option<u64>) -> anyhow::Result<()> {
    use redis::AsyncCommands;
    // No secrets: it reads the tables (made when missing) and the keys.
    let pool = startup::connect_database(db.as_str(), 2).await?;
    startup::migrate(&pool).await?;
    let mut conn = startup::connect_redis(redis).await?;
    let keys = Keys::new(&redis.key_prefix);
    let vouchers: Vec<u64> = match voucher {
        Some(id) => vec![id],
        None => conn.smembers(keys.seckill_active()).await?,
    };
    let mut drift = 0;
    for voucher in vouchers {
        let report = hmdp::seckill::reconcile(&pool, &mut conn, &keys, voucher).await?;
        print!("{}", report.render());
        if !report.agrees() {
            drift += 1;
        }
    }
    anyhow::ensure!(drift == 0, "{drift} voucher(s) not drained or with drift");
    Ok(())
}

async fn seed_users(
    db: &DatabaseSettings,
    redis: &RedisSettings,
    auth: &AuthSettings,
    count: u64,
    out: &std::path::Path,
    first_phone: u64,
) -> anyhow::Result<()> {
    use std::io::Write;
    auth.validate()?;
    let started = std::time::Instant::now();
    let pool = startup::connect_database(db.url.as_str(), db.max_connections).await?;
    startup::migrate(&pool).await?;
    let conn = startup::connect_redis(redis).await?;
    let sessions = SessionStore::new(conn, Keys::new(&redis.key_prefix));
    let tokens = TokenKeys::new(auth.jwt_secret.as_bytes());
    let users = hmdp::auth::seed_users(&pool, &sessions, &tokens, first_phone, count).await?;
    let mut file = std::io::BufWriter::new(std::fs::File::create(out)?);
    writeln!(file, "userId,phone,token")?;
    for user in &users {
        writeln!(file, "{},{},{}", user.id, user.phone, user.token)?;
    }
    file.flush()?;
    eprintln!("seeded {} users in {:.1?}; tokens in {}", users.len(), started.elapsed(), out.display());
    Ok(())
}
