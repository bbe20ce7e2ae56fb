//! A voucher's guard: what a buyer must do before the order route.

use serde::{Deserialize, Serialize};

/// What stands between a buyer and the order route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Guard {
    /// The order route as it always was; a path asked for is ignored.
    #[default]
    None,
    /// An order needs a signed, single-use path asked for first.
    Path,
    /// The path is given only for a solved proof-of-work challenge.
    Challenge,
}

impl Guard {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Path => "path",
            Self::Challenge => "challenge",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Self> {
        match name {
            "none" => Some(Self::None),
            "path" => Some(Self::Path),
            "challenge" => Some(Self::Challenge),
            _ => None,
        }
    }
}
