//! [`ApiError`]: an error answer, as problem+json.

use bytes::Bytes;
use hyper::{Response, StatusCode};

use super::respond;
use crate::http::{self, Body};
use crate::json;
use crate::models::{Errors, ProblemDetails};
/// An error answer: a status and a problem+json body.
#[derive(Debug)]
pub struct ApiError {
    pub(super) status: StatusCode,
    pub(super) detail: String,
    /// Per-parameter messages (ValidationProblemDetails' `errors`).
    pub(super) errors: Vec<(String, String)>,
}

impl ApiError {
    /// A 400 with `detail`.
    pub fn bad_request(detail: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            detail: detail.into(),
            errors: Vec::new(),
        }
    }

    /// A 400 naming the parameter `field`.
    pub fn invalid(field: &str, message: impl Into<String>) -> ApiError {
        let message = message.into();
        ApiError {
            status: StatusCode::BAD_REQUEST,
            detail: message.clone(),
            errors: vec![(field.to_string(), message)],
        }
    }

    /// A response with `status` and `detail` (406 has no body).
    pub fn with_status(status: StatusCode, detail: impl Into<String>) -> ApiError {
        ApiError {
            status,
            detail: detail.into(),
            errors: Vec::new(),
        }
    }

    /// What it says.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// A 500: something on serve's side failed.
    pub fn internal(detail: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            detail: detail.into(),
            errors: Vec::new(),
        }
    }

    pub(super) fn too_many(kind: &str, limit: usize) -> ApiError {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            detail: format!(
                "Too many requests: {} {} operation{} running already.",
                limit,
                kind,
                if limit == 1 { " is" } else { "s are" }
            ),
            errors: Vec::new(),
        }
    }

    fn status_title(&self) -> &'static str {
        match self.status {
            StatusCode::BAD_REQUEST if !self.errors.is_empty() => {
                "One or more validation errors occurred."
            }
            StatusCode::BAD_REQUEST => "Bad Request",
            StatusCode::TOO_MANY_REQUESTS => "Too Many Requests",
            StatusCode::NOT_FOUND => "Not Found",
            StatusCode::NOT_IMPLEMENTED => "Not Implemented",
            StatusCode::REQUEST_TIMEOUT => "Request Timeout",
            _ => "Internal Server Error",
        }
    }

    /// The problem+json response (406 has no body, as dotnet-monitor's).
    pub fn response(&self) -> Response<Body> {
        if self.status == StatusCode::NOT_ACCEPTABLE {
            let mut r = Response::new(http::full(Bytes::new()));
            *r.status_mut() = self.status;
            return r;
        }
        let body = json::to_string(&ProblemDetails {
            kind: match self.status {
                StatusCode::BAD_REQUEST => "https://tools.ietf.org/html/rfc9110#section-15.5.1",
                StatusCode::TOO_MANY_REQUESTS => "https://tools.ietf.org/html/rfc6585#section-4",
                StatusCode::NOT_FOUND => "https://tools.ietf.org/html/rfc9110#section-15.5.5",
                StatusCode::REQUEST_TIMEOUT => "https://tools.ietf.org/html/rfc9110#section-15.5.9",
                _ => "https://tools.ietf.org/html/rfc9110#section-15.6.1",
            },
            title: self.status_title(),
            status: self.status.as_u16(),
            detail: &self.detail,
            errors: Errors(&self.errors),
        });
        respond(self.status, "application/problem+json", body)
    }
}

impl From<dsipc_tokio::Error> for ApiError {
    fn from(e: dsipc_tokio::Error) -> ApiError {
        // The runtime refused or failed: dotnet-monitor answers these 400 with the reason.
        ApiError::bad_request(e.to_string())
    }
}

impl From<dsipc_recipes::RecipeError> for ApiError {
    fn from(e: dsipc_recipes::RecipeError) -> ApiError {
        ApiError::bad_request(e.to_string())
    }
}

pub(crate) type ApiResult = Result<Response<Body>, ApiError>;

pub(super) fn unknown_operation(id: &str) -> ApiError {
    ApiError::bad_request(format!("Operation id '{}' was not found.", id))
}
