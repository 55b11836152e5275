//! `/livemetrics`: not offered yet.

use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use super::api::{Api, ApiError, ApiResult, Params};

/// Answers `GET /livemetrics` and `POST /livemetrics`.
pub(super) async fn route(
    _api: &Api,
    _req: Request<Incoming>,
    _params: &Params,
    _host: &str,
) -> ApiResult {
    Err(ApiError::with_status(
        StatusCode::NOT_IMPLEMENTED,
        "/livemetrics is not implemented by dsipc serve yet.",
    ))
}
