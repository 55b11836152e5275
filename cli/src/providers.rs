//! dotnet-trace's provider syntax, profiles and `--clrevents`: the session layer's
//! (`dsipc::session::providers`), where every library user finds them too.

pub use dsipc::session::providers::{CollectArgs, ProviderSpec};
