//! dotnet-trace's provider syntax and profiles: the session layer's
//! (`dsipc::session::providers`), where every library user finds them too.

pub use dsipc::session::providers::{parse_providers, Profile, ProviderSpec};

/// dotnet-trace's `cpu-sampling` profile, its default when no provider is given.
pub fn default_providers() -> Vec<ProviderSpec> {
    Profile::CpuSampling.providers()
}
