//! `hmdp-lab`: every classic seckill strategy and lock pitfall side by side
//! on the same requests, each on a fresh voucher, the tables audited after
//! each; exits non-zero when a strategy did not behave as it is known to (a
//! correct one broke, or a broken one did not break).

use clap::Parser;
use hmdp::{
    Config,
    config::{
        AuthSettings, DatabaseSettings, LimitSettings, OrderSettings, RedisSettings, ReplicaSettings, SalePathSettings,
        SeckillSettings, ServerSettings,
    },
};
use hmdp_lab::LabOptions;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(name = "hmdp-lab", version, about = "The seckill strategy lab")]
struct Cli {
    #[command(flatten)]
    db: DatabaseSettings,
    #[command(flatten)]
    redis: RedisSettings,
    /// The service's own paths run with these, as `hmdp serve` would.
    #[command(flatten)]
    seckill: SeckillSettings,
    #[command(flatten)]
    options: LabOptions,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let Cli { db, redis, seckill, options } = Cli::parse();
    seckill.validate()?;
    // The service runs in this process and no token leaves it: a secret of
    // its own, never a configured one.
    let auth = AuthSettings { jwt_secret: uuid::Uuid::new_v4().simple().to_string(), log_sms_codes: false };
    // Only the order paths' settings are the lab's to choose.
    let config = Config {
        db,
        redis,
        seckill,
        auth,
        server: ServerSettings::default(),
        limits: LimitSettings::default(),
        orders: OrderSettings::default(),
        events: Default::default(),
        sale_path: SalePathSettings::default(),
        replica: ReplicaSettings::default(),
        hot_keys: Default::default(),
    };
    let report = hmdp_lab::run(&config, &options).await?;
    if options.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.markdown());
    }
    if let Some(path) = &options.save_json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    if let Some(path) = &options.chart {
        std::fs::write(path, hmdp_lab::render_svg(&report)?)?;
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
