//! dotnet-monitor's API inside a program of one's own: the runtimes of this machine on the
//! address given, authentication off (with dotnet-monitor's warning), until Ctrl-C.
//!
//! ```text
//! cargo run -p dsipc-serve --example embed -- 127.0.0.1:52323
//! curl http://127.0.0.1:52323/processes
//! ```

use dsipc_serve::{Auth, Options, Server, NO_AUTH_WARNING};

fn main() {
    let addr = match std::env::args().nth(1) {
        Some(a) => a,
        None => {
            eprintln!("usage: embed HOST:PORT");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        // The listener is ours: any address, any socket options, bound before serving.
        let listener = match tokio::net::TcpListener::bind(&addr).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("cannot listen on {}: {}", addr, e);
                std::process::exit(1);
            }
        };
        let mut options = Options::default();
        options.auth = Auth::Off;
        eprintln!("{}", NO_AUTH_WARNING);
        let mut server = Server::new(options, 1).expect("serve's state");
        eprintln!("API on http://{}", listener.local_addr().expect("bound"));
        server.serve_api(listener);
        let _ = tokio::signal::ctrl_c().await;
        // Dropping the server stops its listeners and sessions.
    });
}
