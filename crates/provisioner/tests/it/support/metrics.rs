//! The provisioner's HTTP endpoint as the tests read it: a port for `--http-endpoint`, a plain
//! GET, and the samples of a metrics exposition.

use std::collections::BTreeMap;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("probe port");
    listener.local_addr().expect("local address").port()
}

/// A plain HTTP/1.1 GET on 127.0.0.1; `None` when nothing answers.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String, String)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let content_type = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    Some((status, content_type, body.to_string()))
}

/// The metrics exposition of the provisioner listening on `port`.
pub async fn scrape(port: u16) -> Option<String> {
    match http_get(port, "/metrics").await? {
        (200, _, body) => Some(body),
        _ => None,
    }
}

/// The sum of the samples named `name` whose labels include every pair of `labels`; `None`
/// when there is no such sample.
pub fn sample(exposition: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in exposition.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = match line.rsplit_once(' ') {
            Some(parts) => parts,
            None => continue,
        };
        let (metric, label_text) = match series.split_once('{') {
            Some((m, rest)) => (m, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if metric != name {
            continue;
        }
        let have = parse_labels(label_text);
        if labels
            .iter()
            .all(|(k, v)| have.get(*k).map(String::as_str) == Some(*v))
            && let Ok(v) = value.parse::<f64>()
        {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(escaped);
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').to_string(), value);
        rest = &after[end..];
    }
    out
}
