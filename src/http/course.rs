//! The course's front end reads a failure's `errorMsg` only from a 2xx
//! answer (its backend answers business failures with HTTP 200 and
//! `success:false`). nginx marks requests that come in under `/api/` with
//! `X-Api-Style: course`, and those get their 4xx failures as 200, the
//! envelope unchanged. 401 stays 401: the course's pages send the user to
//! the login page on it. 5xx stay too: they are not business answers.

use axum::{
    body::Body,
    http::{HeaderMap, HeaderName, Response, StatusCode},
};

const X_API_STYLE: HeaderName = HeaderName::from_static("x-api-style");
const COURSE_STYLE: &str = "course";

pub(super) fn asks_for_course_style(headers: &HeaderMap) -> bool {
    headers.get(&X_API_STYLE).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(COURSE_STYLE.as_bytes()))
}

pub(super) fn answer_failure_with_200(response: &mut Response<Body>) {
    let status = response.status();
    if status.is_client_error() && status != StatusCode::UNAUTHORIZED {
        *response.status_mut() = StatusCode::OK;
    }
}
