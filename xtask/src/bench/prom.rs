//! Scraping a provisioner's `/metrics` (Prometheus or OpenMetrics text) over plain HTTP.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One sample line: name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// Parses the sample lines of an exposition; comments and malformed lines are skipped.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let (labels, len) = parse_labels(&line[open + 1..])?;
            (&line[..open], labels, &line[open + 1 + len..])
        }
        None => {
            let end = line.find(char::is_whitespace)?;
            (&line[..end], Vec::new(), &line[end..])
        }
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.trim().to_string(),
        labels,
        value,
    })
}

/// Labels up to the closing `}`; returns them and the bytes consumed including the `}`.
fn parse_labels(s: &str) -> Option<(Vec<(String, String)>, usize)> {
    let mut labels = Vec::new();
    let mut chars = s.char_indices().peekable();
    loop {
        while chars
            .next_if(|(_, c)| *c == ',' || c.is_whitespace())
            .is_some()
        {}
        let (start, c) = *chars.peek()?;
        if c == '}' {
            return Some((labels, start + 1));
        }
        let mut key_end = start;
        for (i, c) in chars.by_ref() {
            if c == '=' {
                key_end = i;
                break;
            }
        }
        let key = s[start..key_end].trim().to_string();
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()?.1 {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break,
                other => value.push(other),
            }
        }
        labels.push((key, value));
    }
}

/// Sum of every sample named `name` whose labels include all of `filter`.
pub fn sum(samples: &[Sample], name: &str, filter: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            filter
                .iter()
                .all(|(k, v)| s.labels.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|s| s.value)
        .fold(0.0, |a, b| a + b)
}

/// The body of an HTTP/1.0 response (HTTP/1.0 so that neither Go nor hyper chunks it).
pub fn http_body(response: &str) -> Result<&str> {
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("HTTP response without a header end")?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("HTTP status {status:?}");
    }
    Ok(body)
}

/// GET `http://<addr><path>` with a short timeout.
pub async fn get(addr: &str, path: &str) -> Result<String> {
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut buf = Vec::new();
        stream.read_to_end(&mut buf).await?;
        anyhow::Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    let response = tokio::time::timeout(Duration::from_secs(10), fetch)
        .await
        .with_context(|| format!("GET http://{addr}{path}: timed out"))?
        .with_context(|| format!("GET http://{addr}{path}"))?;
    Ok(http_body(&response)
        .with_context(|| format!("GET http://{addr}{path}"))?
        .to_string())
}

/// Scrapes `/metrics` and parses it.
pub async fn scrape(addr: &str) -> Result<Vec<Sample>> {
    Ok(parse(&get(addr, "/metrics").await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP rest_client_requests_total Number of HTTP requests.
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 12
rest_client_requests_total{code="201",host="127.0.0.1:6443",method="POST"} 3 1700000000
rest_client_requests_total{code="<error>",host="127.0.0.1:6443",method="DELETE"} 1
workqueue_depth{name="csistoragecapacity"} 40
workqueue_depth{name="claims"} 2
process_resident_memory_bytes 1.5e+07
odd{msg="a \"quoted\" } brace",x="y"} 7
broken{x="y" 3
histogram_bucket{le="+Inf"} +Inf
"#;

    #[test]
    fn parses_samples() {
        let s = parse(TEXT);
        assert_eq!(s.len(), 8, "{s:#?}");
        assert_eq!(s[5].name, "process_resident_memory_bytes");
        assert_eq!(s[5].value, 1.5e7);
        assert!(s[5].labels.is_empty());
        assert_eq!(
            s[6].labels,
            vec![
                ("msg".to_string(), "a \"quoted\" } brace".to_string()),
                ("x".to_string(), "y".to_string())
            ]
        );
        assert_eq!(s[7].value, f64::INFINITY);
    }

    #[test]
    fn sums_with_filters() {
        let s = parse(TEXT);
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);
        let cases: &[Case] = &[
            ("rest_client_requests_total", &[], 16.0),
            ("rest_client_requests_total", &[("method", "GET")], 12.0),
            ("workqueue_depth", &[("name", "csistoragecapacity")], 40.0),
            ("workqueue_depth", &[("name", "nope")], 0.0),
            ("missing", &[], 0.0),
        ];
        for (name, filter, want) in cases {
            assert_eq!(sum(&s, name, filter), *want, "{name} {filter:?}");
        }
    }

    #[test]
    fn http_bodies() {
        let ok = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nbody\r\n";
        assert_eq!(http_body(ok).unwrap(), "body\r\n");
        let err = http_body("HTTP/1.1 404 Not Found\r\n\r\nno").unwrap_err();
        assert!(err.to_string().contains("404"), "{err}");
        assert!(http_body("garbage").is_err());
    }
}
