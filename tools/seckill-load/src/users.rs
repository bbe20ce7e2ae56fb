//! The buyers a sale runs with: each a token, and its user id when known.

use anyhow::Context;

/// A user of the run: the token, and the id when known (the audit then
/// checks every answer against that user's row).
pub(crate) struct User {
    pub(crate) id: Option<u64>,
    pub(crate) token: String,
}

/// The users of a CSV of `hmdp seed-users --out` (a `token` column, and a
/// `userId` one when known), in the order of the file: a user's place in
/// the run is its line.
pub(crate) fn tokens_from_file(path: &std::path::Path) -> anyhow::Result<Vec<User>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().context("empty tokens file")?.split(',').map(str::trim).collect();
    let column = header.iter().position(|c| *c == "token").context("no `token` column in the header")?;
    let id_column = header.iter().position(|c| *c == "userId");
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let fields: Vec<&str> = l.split(',').collect();
            let token = fields.get(column).map(|t| (*t).to_owned()).context("short CSV line")?;
            let id = id_column.and_then(|c| fields.get(c)).and_then(|v| v.trim().parse().ok());
            Ok(User { id, token })
        })
        .collect()
}
