//! How a failure of MariaDB or Redis is told apart: "could not be reached"
//! (answered 503, retried) or "refused the command" (a bug or a constraint).
//! A leaf module, so every feature and the HTTP plumbing classify alike
//! without importing each other.

/// Redis could not be reached, did not answer in time, or said it cannot
/// serve yet (LOADING its AOF after a restart, TRYAGAIN, CLUSTERDOWN, a
/// cluster mid-failover), as opposed to a command that Redis refused. The
/// connection crate says it, for the lock and the app alike.
pub(crate) fn redis_unreachable(err: &redis::RedisError) -> bool {
    hmdp_redis::unavailable(err)
}

/// MariaDB could not be reached, or could not serve the statement at that
/// moment (a lock wait timed out, a deadlock, a read-only server, the
/// connection killed, a shutdown): the same statement may pass a moment
/// later, so it is answered 503 and retried, not 500.
pub(crate) fn db_unreachable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(db) => db_momentary(db.as_ref()),
        _ => false,
    }
}

/// MariaDB's errors of the moment, by number: they say nothing of the rows.
const MOMENTARY: &[u16] = &[
    1040, // too many connections
    1053, // server shutdown in progress
    1205, // lock wait timeout
    1213, // deadlock
    1290, // --read-only
    1317, // query interrupted
    1792, // read-only transaction
    1836, // read-only mode
    1927, // connection killed
    1969, // max_statement_time exceeded
    2006, // server gone away
    2013, // lost connection during query
];

/// InnoDB chose this transaction as a deadlock's victim and rolled it
/// back: run again, it usually passes at once.
pub(crate) fn db_deadlock(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if error_number(db.as_ref()) == Some(1213))
}

fn db_momentary(db: &dyn sqlx::error::DatabaseError) -> bool {
    error_number(db).is_some_and(|number| MOMENTARY.contains(&number))
}

/// MariaDB's number for the error (1213, 1205, ...).
fn error_number(db: &dyn sqlx::error::DatabaseError) -> Option<u16> {
    db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>().map(|e| e.number())
}

/// MariaDB refused the statement for the data it carries: a unique or
/// foreign key, a CHECK, a NOT NULL, a value out of range or too long, a
/// trigger's SIGNAL (SQLSTATE classes 23, 22 and 45), or a row that is not
/// there. Only such a refusal blames an order; any other error (see
/// `db_unreachable`) would pass on a retry.
pub(crate) fn refused_by_the_data(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::RowNotFound => true,
        sqlx::Error::Database(db) => {
            !db_momentary(db.as_ref())
                && (db.kind() != sqlx::error::ErrorKind::Other
                    || db.code().is_some_and(|state| ["22", "23", "45"].iter().any(|class| state.starts_with(class))))
        }
        _ => false,
    }
}

/// Classifies a MariaDB error that reaches an answer (`true`: unreachable)
/// and counts it for `/metrics`, by kind.
pub(crate) fn db_failure(err: &sqlx::Error) -> bool {
    count_error("database", db_unreachable(err))
}

/// Classifies a Redis error that reaches an answer (`true`: unreachable)
/// and counts it for `/metrics`, by kind.
pub(crate) fn redis_failure(err: &redis::RedisError) -> bool {
    count_error("redis", redis_unreachable(err))
}

fn count_error(dependency: &'static str, unavailable: bool) -> bool {
    let kind = if unavailable { "unavailable" } else { "error" };
    metrics::counter!("hmdp_dependency_errors_total", "dependency" => dependency, "kind" => kind).increment(1);
    unavailable
}

/// The unique index a statement ran into, by name. MariaDB reports it only
/// in the message (`Duplicate entry '1-2' for key 'uk_user_voucher'`;
/// MySQL 8 writes `'tb_voucher_order.uk_user_voucher'`), with error 1062.
pub fn unique_violation(err: &sqlx::Error) -> Option<String> {
    let db = err.as_database_error()?;
    if db.code().as_deref() != Some("23000") || !db.message().starts_with("Duplicate entry") {
        return None;
    }
    let (_, tail) = db.message().rsplit_once(" for key '")?;
    let key = tail.strip_suffix('\'')?;
    Some(key.rsplit('.').next().unwrap_or(key).to_owned())
}

/// Maps a violation of the unique index `index` to `to`, where the statement
/// that can run into it is made (realworld-axum-sqlx's `on_constraint`):
/// the index is named by the code that knows what it means, in that code's
/// own error type.
pub trait OnUnique<T> {
    fn on_unique<E: From<sqlx::Error>>(self, index: &str, to: impl FnOnce() -> E) -> Result<T, E>;
}

impl<T> OnUnique<T> for Result<T, sqlx::Error> {
    fn on_unique<E: From<sqlx::Error>>(self, index: &str, to: impl FnOnce() -> E) -> Result<T, E> {
        self.map_err(|err| if unique_violation(&err).as_deref() == Some(index) { to() } else { err.into() })
    }
}

#[cfg(test)]
mod tests {
    use redis::{ErrorKind, RedisError, ServerErrorKind};

    use super::redis_unreachable;

    #[test]
    fn a_redis_still_loading_its_aof_is_unavailable_and_a_refused_command_is_not() {
        // What a Redis restarted on its AOF answers until it has loaded it:
        // a 503 to retry, not a 500 (seen in a chaos run: 81 answers).
        let loading = RedisError::from((ErrorKind::Server(ServerErrorKind::BusyLoading), "loading"));
        assert!(redis_unreachable(&loading));
        let try_again = RedisError::from((ErrorKind::Server(ServerErrorKind::TryAgain), "try again"));
        assert!(redis_unreachable(&try_again));
        let wrong_type = RedisError::from((ErrorKind::Server(ServerErrorKind::ResponseError), "WRONGTYPE"));
        assert!(!redis_unreachable(&wrong_type));
    }

    #[test]
    fn a_cluster_mid_failover_is_unavailable_not_an_internal_error() {
        // What the client gave up with while a replica pointed at its dead
        // master (seen in a master-kill chaos run: 40 answers of HTTP 500).
        let moved =
            RedisError::from((ErrorKind::Server(ServerErrorKind::Moved), "MOVED", "9842 127.0.0.1:7002".into()));
        assert!(redis_unreachable(&moved));
        let readonly = RedisError::from((ErrorKind::Server(ServerErrorKind::ReadOnly), "READONLY"));
        assert!(redis_unreachable(&readonly));
        let no_node = RedisError::from((ErrorKind::ClusterConnectionNotFound, "no connection"));
        assert!(redis_unreachable(&no_node));
    }
}
