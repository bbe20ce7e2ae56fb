//! Connections to MariaDB and Redis, as every binary makes them. A leaf
//! module: start-up, the seckill's consumer and the tools share it.

use std::time::Duration;

use anyhow::Context;
use hmdp_redis::{Endpoint, Redis};
use sqlx::{
    ConnectOptions, Connection, MySqlPool,
    mysql::{MySqlConnectOptions, MySqlConnection, MySqlPoolOptions, MySqlSslMode},
};

use crate::config::{DatabaseSettings, RedisSettings};

/// Connects, first creating the database named in the URL when it does not
/// exist (a fresh MariaDB has none).
pub async fn connect_database(url: &str, max_connections: u32) -> anyhow::Result<MySqlPool> {
    connect_pool(url, max_connections, None).await
}

/// The instance's own pool, whose sessions MariaDB ends when a
/// transaction of theirs sits idle past `DB_IDLE_TRANSACTION_TIMEOUT_S`
/// (a locking read holds the stock row as well as a write does):
/// an instance cut off mid-transaction would otherwise hold the sale's
/// stock row, and stop every other order, for as long as the cut lasts.
pub(crate) async fn connect_service_database(settings: &DatabaseSettings) -> anyhow::Result<MySqlPool> {
    connect_pool(settings.url.as_str(), settings.max_connections, Some(settings.idle_transaction_timeout_s)).await
}

async fn connect_pool(
    url: &str,
    max_connections: u32,
    idle_transaction_timeout_s: Option<u32>,
) -> anyhow::Result<MySqlPool> {
    let options = mysql_options(url, "DATABASE_URL")?;
    let database = options.get_database().context("DATABASE_URL names no database")?.to_owned();
    ensure_database(&options, &database).await?;
    MySqlPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(5))
        .after_connect(move |conn, _| {
            Box::pin(async move {
                if let Some(seconds) = idle_transaction_timeout_s {
                    sqlx::query("SET SESSION idle_transaction_timeout = ?").bind(seconds).execute(conn).await?;
                }
                Ok(())
            })
        })
        .connect_with(options.log_statements(tracing::log::LevelFilter::Trace))
        .await
        .with_context(|| format!("connecting to MariaDB database {database}"))
}

/// The URL's options, refused when it names a certificate authority that
/// sqlx would not use: only `VERIFY_CA` and `VERIFY_IDENTITY` check the
/// server's certificate against `ssl-ca`; under `PREFERRED` (the default)
/// or `REQUIRED` any certificate passes, and the password goes to
/// whoever answers, while the operator believes the server verified.
fn mysql_options(url: &str, setting: &str) -> anyhow::Result<MySqlConnectOptions> {
    let options: MySqlConnectOptions = url.parse().with_context(|| format!("parsing {setting}"))?;
    let names_ca = url::Url::parse(url).is_ok_and(|url| {
        url.query_pairs().any(|(key, value)| matches!(&*key, "ssl-ca" | "sslca") && !value.trim().is_empty())
    });
    let verifies = matches!(options.get_ssl_mode(), MySqlSslMode::VerifyCa | MySqlSslMode::VerifyIdentity);
    anyhow::ensure!(
        !names_ca || verifies,
        "{setting} names a certificate authority (ssl-ca) but its ssl-mode ({:?}) does not verify the server \
         against it: add ssl-mode=VERIFY_IDENTITY (or VERIFY_CA, which does not check the server's name)",
        options.get_ssl_mode()
    );
    Ok(options)
}

async fn ensure_database(options: &MySqlConnectOptions, database: &str) -> anyhow::Result<()> {
    // Identifiers cannot be bound; this name comes from our own settings and
    // is restricted to characters that need no escaping inside backticks.
    anyhow::ensure!(
        !database.is_empty()
            && database.len() <= 64
            && database.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
        "database name {database:?} must be 1-64 characters of [A-Za-z0-9_]"
    );
    let mut conn = MySqlConnection::connect_with(&options.clone().database("information_schema"))
        .await
        .context("connecting to MariaDB")?;
    sqlx::raw_sql(&format!(
        "CREATE DATABASE IF NOT EXISTS `{database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
    ))
    .execute(&mut conn)
    .await
    .with_context(|| format!("creating database {database}"))?;
    conn.close().await.ok();
    Ok(())
}

/// The pool for reads that may lag: the replica `DATABASE_READ_URL` names,
/// or the primary when none is set.
#[derive(Clone)]
pub(crate) struct ReadReplica(pub MySqlPool);

/// MariaDB's ER_BAD_DB_ERROR.
const UNKNOWN_DATABASE: u16 = 1049;

/// Connects to a replica for reads. Nothing is created there (a replica
/// takes its databases from the primary), and a server that is not
/// read-only is refused: reads sent to a second primary, or to the primary
/// itself under another name, would hide that the setting is wrong.
pub(crate) async fn connect_read_replica(url: &str, max_connections: u32) -> anyhow::Result<MySqlPool> {
    let options = mysql_options(url, "DATABASE_READ_URL")?;
    let options = options.log_statements(tracing::log::LevelFilter::Trace);
    // The first instance of a new deployment creates the database on the
    // primary a moment before it asks the replica for it: until replication
    // has applied the CREATE DATABASE, the replica answers "unknown
    // database". That is lag, not a wrong setting: asked again.
    let connecting = async {
        loop {
            let pool = MySqlPoolOptions::new()
                .max_connections(max_connections)
                .acquire_timeout(Duration::from_secs(5))
                .connect_with(options.clone())
                .await;
            match pool {
                Err(sqlx::Error::Database(err))
                    if err.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>().map(|e| e.number())
                        == Some(UNKNOWN_DATABASE) =>
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => break other,
            }
        }
    };
    let pool = tokio::time::timeout(Duration::from_secs(10), connecting)
        .await
        .context("the replica of DATABASE_READ_URL did not answer, or did not have the database, within 10 s")?
        .context("connecting to the replica of DATABASE_READ_URL")?;
    let read_only: i64 = sqlx::query_scalar("SELECT CAST(@@read_only AS SIGNED)")
        .fetch_one(&pool)
        .await
        .context("asking the replica of DATABASE_READ_URL whether it is read-only")?;
    anyhow::ensure!(
        read_only == 1,
        "DATABASE_READ_URL names a server that is not read-only (@@read_only = 0): it must be a replica, started with --read-only"
    );
    Ok(pool)
}

/// A reconnecting connection to one Redis or to the cluster the settings
/// name. Commands time out instead of hanging, so a dead Redis becomes a
/// quick 503 rather than a stuck request; a cluster that does not serve
/// every slot is an error here, at start-up.
pub async fn connect_redis(settings: &RedisSettings) -> anyhow::Result<Redis> {
    connect_redis_with(settings, Duration::from_secs(2)).await
}

pub(crate) async fn connect_redis_with(settings: &RedisSettings, response_timeout: Duration) -> anyhow::Result<Redis> {
    let mut endpoint = Endpoint::new(&settings.url, settings.cluster_nodes.as_deref())?;
    if let Some(path) = settings.ca_file() {
        let pem = std::fs::read(path).with_context(|| format!("reading REDIS_CA_FILE {path}"))?;
        endpoint = endpoint.with_tls_roots(pem)?;
    }
    let described = endpoint.describe();
    endpoint.connect(response_timeout).await.with_context(|| format!("connecting to Redis ({described})"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sqlx::MySqlPool;

    use super::{connect_database, connect_read_replica, connect_service_database};
    use crate::config::{DatabaseSettings, DatabaseUrl};

    /// A CA named without `ssl-mode=VERIFY_CA` or `VERIFY_IDENTITY` is one
    /// sqlx never reads: under `PREFERRED` or `REQUIRED` any certificate
    /// passes, and the password goes to whoever answers. Refused before any
    /// connection (nothing listens on port 1), as a Redis CA with
    /// `redis://` is, and without the password in the error.
    #[tokio::test]
    async fn a_database_url_naming_a_ca_without_verifying_the_server_is_refused() {
        let server = "mysql://hmdp:db-pass-123@127.0.0.1:1/hmdp";
        let unverified =
            ["ssl-ca=/etc/hmdp/ca.pem", "ssl-mode=PREFERRED&ssl-ca=/ca.pem", "sslmode=required&sslca=/ca.pem"];
        for query in unverified {
            let url = format!("{server}?{query}");
            for said in [
                format!("{:#}", connect_database(&url, 1).await.unwrap_err()),
                format!("{:#}", connect_read_replica(&url, 1).await.unwrap_err()),
            ] {
                assert!(said.contains("ssl-mode=VERIFY_IDENTITY"), "{query}: {said}");
                assert!(!said.contains("db-pass-123"), "{query}: {said}");
            }
        }
        let verified =
            ["ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem", "ssl-ca=/ca.pem&sslmode=verify_ca", "ssl-mode=REQUIRED"];
        for query in verified {
            let said = format!("{:#}", connect_database(&format!("{server}?{query}"), 1).await.unwrap_err());
            assert!(!said.contains("VERIFY_IDENTITY"), "{query} was refused for its CA: {said}");
        }
    }

    /// What an instance cut off from MariaDB mid-transaction leaves: a
    /// transaction nobody finishes, holding the stock row (here by a
    /// locking read, as a group's transaction takes it before it writes).
    /// The server ends it, and the row is free again.
    #[sqlx::test(migrations = "./migrations")]
    async fn the_services_pool_has_an_idle_transaction_ended_by_the_server_and_its_rows_freed(pool: MySqlPool) {
        let database: String = sqlx::query_scalar("SELECT DATABASE()").fetch_one(&pool).await.unwrap();
        let server = std::env::var("DATABASE_URL").expect("DATABASE_URL");
        let (server, _) = server.rsplit_once('/').expect("a database in DATABASE_URL");
        let settings = DatabaseSettings {
            url: DatabaseUrl::new(format!("{server}/{database}")),
            max_connections: 1,
            idle_transaction_timeout_s: 1,
        };
        sqlx::query("INSERT INTO tb_user (phone, nick_name) VALUES ('13900000001', 'held')")
            .execute(&pool)
            .await
            .unwrap();
        let held = "SELECT id FROM tb_user WHERE phone = '13900000001' FOR UPDATE";
        let service = connect_service_database(&settings).await.unwrap();
        let mut idle = service.begin().await.unwrap();
        sqlx::query(held).execute(&mut *idle).await.unwrap();
        let mut other = pool.begin().await.unwrap();
        let nowait = format!("{held} NOWAIT");
        assert!(sqlx::query(&nowait).execute(&mut *other).await.is_err(), "the row is held to begin with");
        other.rollback().await.unwrap();
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        let after = sqlx::query("SELECT 1").execute(&mut *idle).await;
        assert!(after.is_err(), "a transaction idle past its timeout was left open");
        let mut other = pool.begin().await.unwrap();
        sqlx::query(&nowait).execute(&mut *other).await.expect("the row was freed");
    }
}
