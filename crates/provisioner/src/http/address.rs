//! Go listen addresses (`net.Listen("tcp", addr)`) and binding them.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::net::TcpListener;

/// Where to listen, as parsed from `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Host {
    /// Empty host (`:8080`): every interface.
    Any,
    /// An IP literal (`127.0.0.1`, `[::1]`).
    Ip(IpAddr),
    /// A name to resolve (`localhost`).
    Name(String),
}

/// Splits a Go listen address the way `net.SplitHostPort` does and parses the port as
/// `net.Listen` does: a number from 0 to 65535, empty meaning 0 (any free port). Service
/// names (`:http`) are not looked up.
pub(crate) fn parse(address: &str) -> Result<(Host, u16), String> {
    let (host, port) = split_host_port(address)?;
    let port = if port.is_empty() {
        0
    } else {
        port.parse::<u16>()
            .map_err(|_| format!("invalid port {port:?}: want a number from 0 to 65535"))?
    };
    let host = if host.is_empty() {
        Host::Any
    } else if let Ok(ip) = host.parse::<IpAddr>() {
        Host::Ip(ip)
    } else if host.contains(':') {
        return Err(format!("invalid IP address {host:?}"));
    } else {
        Host::Name(host.to_string())
    };
    Ok((host, port))
}

fn split_host_port(address: &str) -> Result<(&str, &str), String> {
    let missing_port = || "missing port in address (want host:port, e.g. :8080)".to_string();
    let colon = address.rfind(':').ok_or_else(missing_port)?;
    let (host, port) = (&address[..colon], &address[colon + 1..]);
    if let Some(inner) = host.strip_prefix('[') {
        // `[v6]:port`: the bracket must close right before the port's colon.
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| "missing ']' in address".to_string())?;
        if inner.contains(['[', ']']) {
            return Err("unexpected '[' or ']' in address".into());
        }
        return Ok((inner, port));
    }
    if host.contains(':') {
        return Err("too many colons in address (write IPv6 hosts as [::1]:8080)".into());
    }
    if host.contains(['[', ']']) {
        return Err("unexpected '[' or ']' in address".into());
    }
    Ok((host, port))
}

/// The addresses to try, in order: `[::]` then `0.0.0.0` for any interface (an IPv6 socket
/// on Linux also accepts IPv4, and hosts without IPv6 fall back), IPv4 results first for a
/// name (Go listens on the first IPv4 address of a name).
pub(crate) fn candidates(host: &Host, port: u16, resolved: &[SocketAddr]) -> Vec<SocketAddr> {
    match host {
        Host::Any => vec![
            SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port),
            SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
        ],
        Host::Ip(ip) => vec![SocketAddr::new(*ip, port)],
        Host::Name(_) => {
            let mut out: Vec<SocketAddr> =
                resolved.iter().filter(|a| a.is_ipv4()).copied().collect();
            out.extend(resolved.iter().filter(|a| a.is_ipv6()));
            out
        }
    }
}

/// Binds `address` now; the error says why, for the start-up message.
pub(crate) async fn bind(address: &str) -> io::Result<TcpListener> {
    let (host, port) =
        parse(address).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let resolved: Vec<SocketAddr> = match &host {
        Host::Name(name) => tokio::net::lookup_host((name.as_str(), port))
            .await?
            .collect(),
        _ => Vec::new(),
    };
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the host name has no addresses");
    for candidate in candidates(&host, port, &resolved) {
        match TcpListener::bind(candidate).await {
            Ok(listener) => return Ok(listener),
            Err(e) => last = e,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Input and either the parse or a fragment of the error.
    type Case = (&'static str, Result<(Host, u16), &'static str>);

    #[test]
    fn parses_go_listen_addresses() {
        let ip = |s: &str| Host::Ip(s.parse().unwrap());
        let cases: &[Case] = &[
            (":8080", Ok((Host::Any, 8080))),
            ("127.0.0.1:8080", Ok((ip("127.0.0.1"), 8080))),
            ("0.0.0.0:9", Ok((ip("0.0.0.0"), 9))),
            ("[::1]:8080", Ok((ip("::1"), 8080))),
            ("[::]:80", Ok((ip("::"), 80))),
            ("[]:80", Ok((Host::Any, 80))),
            ("localhost:8080", Ok((Host::Name("localhost".into()), 8080))),
            (":0", Ok((Host::Any, 0))),
            ("127.0.0.1:", Ok((ip("127.0.0.1"), 0))),
            ("8080", Err("missing port")),
            ("", Err("missing port")),
            ("::1:8080", Err("too many colons")),
            ("[::1]8080", Err("missing ']'")),
            ("[::1", Err("missing ']'")),
            ("[a]b]:1", Err("unexpected '['")),
            ("a]:1", Err("unexpected '['")),
            (":http", Err("invalid port \"http\"")),
            (":65536", Err("invalid port")),
            (":-1", Err("invalid port")),
            // Go resolves a bracketed non-IP host as a name too.
            ("[zz]:80", Ok((Host::Name("zz".into()), 80))),
            ("[1:2::zz]:80", Err("invalid IP address")),
        ];
        for (input, want) in cases {
            let got = parse(input);
            match want {
                Ok(want) => assert_eq!(got.as_ref(), Ok(want), "{input:?}"),
                Err(fragment) => {
                    let err = got.expect_err(input);
                    assert!(err.contains(fragment), "{input:?}: {err}");
                }
            }
        }
    }

    #[test]
    fn candidates_prefer_dual_stack_then_ipv4() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            candidates(&Host::Any, 80, &[]),
            [a("[::]:80"), a("0.0.0.0:80")]
        );
        assert_eq!(
            candidates(&Host::Ip("::1".parse().unwrap()), 80, &[]),
            [a("[::1]:80")]
        );
        assert_eq!(
            candidates(
                &Host::Name("localhost".into()),
                80,
                &[a("[::1]:80"), a("127.0.0.1:80")]
            ),
            [a("127.0.0.1:80"), a("[::1]:80")]
        );
        assert!(candidates(&Host::Name("x".into()), 80, &[]).is_empty());
    }

    #[tokio::test]
    async fn binds_loopback_and_reports_bad_addresses() {
        let listener = bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().unwrap().port();
        assert_ne!(port, 0);
        let taken = bind(&format!("127.0.0.1:{port}"))
            .await
            .expect_err("in use");
        assert_eq!(taken.kind(), io::ErrorKind::AddrInUse);
        let any = bind(":0").await.expect("bind any");
        assert!(any.local_addr().unwrap().ip().is_unspecified());
        let named = bind("localhost:0").await.expect("bind localhost");
        assert!(named.local_addr().unwrap().ip().is_loopback());
        let bad = bind("8080").await.expect_err("no port");
        assert_eq!(bad.kind(), io::ErrorKind::InvalidInput);
    }
}
