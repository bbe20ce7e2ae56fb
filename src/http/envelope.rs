//! The Heima-Dianping `Result` envelope: `{"success", "data", "total",
//! "errorMsg", "errorCode"}` with absent fields left out.

use axum::{
    Json,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Serialize;

use crate::errors::ErrorCode;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Envelope<T> {
    success: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_msg: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_code: Option<ErrorCode>,
}

impl<T> Envelope<T> {
    pub(crate) fn failure(msg: String, code: ErrorCode, data: Option<T>) -> Self {
        Self { success: false, data, total: None, error_msg: Some(msg), error_code: Some(code) }
    }
}

/// A successful answer; handlers return `ApiResult<Reply<T>>`.
#[derive(Debug)]
pub(crate) struct Reply<T>(Envelope<T>, StatusCode);

impl<T> Reply<T> {
    pub(crate) fn data(data: T) -> Self {
        Self(
            Envelope { success: true, data: Some(data), total: None, error_msg: None, error_code: None },
            StatusCode::OK,
        )
    }

    /// 202: done as far as it goes, with a note on what is still open.
    pub(crate) fn accepted(data: T, note: String) -> Self {
        Self(
            Envelope { success: true, data: Some(data), total: None, error_msg: Some(note), error_code: None },
            StatusCode::ACCEPTED,
        )
    }
}

impl<T> Reply<Vec<T>> {
    pub(crate) fn list(items: Vec<T>) -> Self {
        let total = items.len() as u64;
        Self::page(items, total)
    }

    /// One page of a longer list: `total` counts them all.
    pub(crate) fn page(items: Vec<T>, total: u64) -> Self {
        let mut ok = Self::data(items);
        ok.0.total = Some(total);
        ok
    }
}

impl Reply<()> {
    /// `{"success":true}` and nothing else.
    pub(crate) fn done() -> Self {
        Self(Envelope { success: true, data: None, total: None, error_msg: None, error_code: None }, StatusCode::OK)
    }
}

impl<T: Serialize> IntoResponse for Reply<T> {
    fn into_response(self) -> Response {
        (self.1, self.0).into_response()
    }
}

impl<T: Serialize> IntoResponse for Envelope<T> {
    fn into_response(self) -> Response {
        Json(self).into_response()
    }
}

/// The documented shape of a success (the OpenAPI document's view of
/// [`Reply`]): `data` carries the route's value, `total` the length of a
/// whole list when `data` is one page of it.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Success<T> {
    /// Always true.
    pub(crate) success: bool,
    pub(crate) data: T,
    pub(crate) total: Option<u64>,
}

/// The documented shape of `{"success":true}` with nothing else.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct Done {
    /// Always true.
    pub(crate) success: bool,
}

/// The documented shape of every failure.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Failure {
    /// Always false.
    pub(crate) success: bool,
    /// For people; may change. Programs read `errorCode`.
    pub(crate) error_msg: String,
    pub(crate) error_code: ErrorCode,
    /// DUPLICATE_ORDER only: the id of the order the user already holds.
    pub(crate) data: Option<String>,
}
