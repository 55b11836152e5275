//! `GET /collectionrules` and `GET /collectionrules/{name}`: the state of each collection
//! rule on a process, in dotnet-monitor's `CollectionRuleDescription` and
//! `CollectionRuleDetailedDescription` shapes.

use super::{json_ok, Api, ApiError, ApiResult, Params};
use crate::json;

impl Api {
    /// The rules' states on the process the query names (or the default one): every rule
    /// (`name` `None`), or rule `name` in detail. A name no rule of that process has is
    /// 400, as dotnet-monitor's ArgumentException (its documented statuses are 200, 400
    /// and 401); a process the rules do not follow yet has none.
    pub(super) async fn collection_rules(&self, name: Option<&str>, params: &Params) -> ApiResult {
        let runtime = self.discovery.select(&params.selector()?).await?;
        match name {
            None => {
                let map = match &self.rules {
                    Some(r) => r.descriptions(runtime.pid),
                    None => Default::default(),
                };
                Ok(json_ok(json::to_string(&map)))
            }
            Some(name) => {
                let found = self
                    .rules
                    .as_ref()
                    .and_then(|r| r.detailed_description(runtime.pid, name));
                match found {
                    Some(d) => Ok(json_ok(json::to_string(&d))),
                    None => Err(ApiError::bad_request(format!(
                        "The collection rule '{}' could not be found.",
                        name
                    ))),
                }
            }
        }
    }
}
