//! The check on an ad-hoc `openai-compat:BASE_URL#MODEL` URL, which a submitter wrote.
//!
//! Every URL the provider will request for `BASE_URL` (the base itself, `…/chat/completions`
//! and the window probe's `…/props`, `…/tokenize`, `…/api/show`, built by the very functions
//! the clients use) is parsed with the HTTP client's own parser ([`reqwest::Url`], the `url`
//! crate's WHATWG parser), and the host that parser yields is the host checked: a `\` ends the
//! authority, percent-encoding is decoded, `127.1` and `0x7f.1` are 127.0.0.1, exactly as for
//! the request itself.
//!
//! An ad-hoc URL is refused when it is not `http` or `https`, or carries a username or password
//! (whatever the settings: they would travel as credentials and show in the provider's label).
//! Unless the operator allows ad-hoc URLs, its host must also be this machine: the literal name
//! `localhost` (any case, no subdomains), an address in 127.0.0.0/8, `[::1]`, or an IPv4-mapped
//! loopback address (`[::ffff:127.0.0.1]`). Every other host name is refused without being
//! looked up: a lookup made here could answer differently from the one the client makes later
//! (DNS rebinding), so only the address written in the URL is trusted. `0.0.0.0` and `[::]`
//! are not loopback and are refused too.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use reqwest::Url;

use crate::openai::chat_completions_url;
use crate::window::probe_urls;

/// The host a parsed URL connects to.
///
/// `reqwest` does not re-export `url::Host`, so this reads [`Url::host_str`], which serializes
/// the parser's host: an IPv6 address bracketed, an IPv4 address in dotted decimal (the WHATWG
/// parser turns every host that ends in a number into one, or fails), anything else a domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UrlHost {
    /// A name, lower-cased by the parser; the client resolves it.
    Domain(String),
    /// An address the client connects to as is.
    Ip(IpAddr),
}

impl UrlHost {
    /// The host of `url` as its parser yielded it, or `None` when it has none.
    pub(crate) fn of(url: &Url) -> Option<Self> {
        let host = url.host_str()?;
        if let Some(bracketed) = host.strip_prefix('[') {
            let address = bracketed.strip_suffix(']')?.parse::<Ipv6Addr>().ok()?;
            return Some(UrlHost::Ip(IpAddr::V6(address)));
        }
        Some(match host.parse::<Ipv4Addr>() {
            Ok(address) => UrlHost::Ip(IpAddr::V4(address)),
            Err(_) => UrlHost::Domain(host.to_string()),
        })
    }

    /// True when the host is this machine without any lookup: `localhost`, 127.0.0.0/8,
    /// `::1`, or an IPv4-mapped loopback address.
    fn is_loopback(&self) -> bool {
        match self {
            UrlHost::Domain(name) => name.eq_ignore_ascii_case("localhost"),
            UrlHost::Ip(IpAddr::V4(address)) => address.is_loopback(),
            UrlHost::Ip(IpAddr::V6(address)) => {
                address.is_loopback()
                    || address
                        .to_ipv4_mapped()
                        .is_some_and(|mapped| mapped.is_loopback())
            }
        }
    }
}

/// Every URL the `openai-compat` provider at `base_url` may request, as the strings the
/// clients are handed: the base itself, the chat URL and the window probe's URLs.
pub(crate) fn request_urls(base_url: &str) -> Vec<String> {
    let mut urls = vec![base_url.to_string(), chat_completions_url(base_url)];
    urls.extend(probe_urls(base_url));
    urls
}

/// Checks an ad-hoc `openai-compat:` base URL (see the module docs); `any_host` is the
/// operator's `allow_adhoc_urls`. The error is the reason it is refused.
pub(crate) fn check_adhoc_url(base_url: &str, any_host: bool) -> Result<(), String> {
    for url in request_urls(base_url) {
        let parsed = Url::parse(&url)
            .map_err(|e| format!("`{url}` is not a URL the HTTP client accepts: {e}"))?;
        check_parsed(&parsed, any_host)?;
    }
    Ok(())
}

/// Checks one URL as the HTTP client parsed it.
fn check_parsed(url: &Url, any_host: bool) -> Result<(), String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "an ad-hoc model URL is http or https, not `{}:`",
            url.scheme()
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "an ad-hoc model URL may not carry a username or password (`user:password@`)".into(),
        );
    }
    if any_host {
        return Ok(());
    }
    match UrlHost::of(url) {
        Some(host) if host.is_loopback() => Ok(()),
        Some(UrlHost::Domain(name)) => Err(format!(
            "ad-hoc model URLs beyond this machine are off, and a host name other than \
             `localhost` ({name}) is refused without a lookup, since what it resolves to may \
             change before the request (DNS rebinding): name this machine as `localhost`, \
             127.0.0.1 or [::1]; the operator can allow other hosts with \
             `allow_adhoc_model_urls = true` in atelier.toml"
        )),
        Some(UrlHost::Ip(address)) => Err(format!(
            "ad-hoc model URLs beyond this machine are off ({address} is not a loopback \
             address); the operator can allow them with `allow_adhoc_model_urls = true` in \
             atelier.toml"
        )),
        None => Err("an ad-hoc model URL names a host".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AgentError;
    use crate::spec::{ModelSpec, ProviderSettings, check};

    /// What [`check`] makes of `openai-compat:BASE#m`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Outcome {
        /// Accepted; the client connects to this host (as `host_str` writes it).
        Allowed(&'static str),
        /// Refused: [`AgentError::NotAllowed`].
        Refused,
    }
    use Outcome::{Allowed, Refused};

    /// Base URLs and what a submitter gets with loopback-only settings.
    const CASES: &[(&str, Outcome)] = &[
        ("http://127.0.0.1:8080/v1", Allowed("127.0.0.1")),
        ("http://localhost:11434/v1", Allowed("localhost")),
        ("http://LOCALHOST/v1", Allowed("localhost")),
        ("https://localhost/v1/", Allowed("localhost")),
        ("http://127.8.9.10/v1", Allowed("127.8.9.10")),
        ("http://[::1]:8080/v1", Allowed("[::1]")),
        ("http://[::ffff:127.0.0.1]/v1", Allowed("[::ffff:7f00:1]")),
        // The WHATWG parser reads these as 127.0.0.1, and so does the client.
        ("http://127.1/v1", Allowed("127.0.0.1")),
        ("http://0x7f.1/v1", Allowed("127.0.0.1")),
        ("http://%31%32%37.0.0.1/v1", Allowed("127.0.0.1")),
        ("http://2130706433/v1", Allowed("127.0.0.1")),
        // `\` ends the authority (as `/` does): the host is the address before it.
        ("http://203.0.113.9\\@127.0.0.1/v1", Refused),
        ("http://169.254.169.254\\@127.0.0.1/", Refused),
        ("http://user:pw@127.0.0.1/v1", Refused),
        ("http://user@localhost/v1", Refused),
        ("http://127.0.0.1@203.0.113.9/", Refused),
        ("http://[::ffff:203.0.113.9]/", Refused),
        ("http://[::127.0.0.1]/", Refused),
        ("http://example.com/v1", Refused),
        ("http://127.0.0.1.nip.io/", Refused),
        ("http://localhost.attacker.example/", Refused),
        ("http://api.localhost/v1", Refused),
        ("http://localhost./v1", Refused),
        ("http://0.0.0.0/", Refused),
        ("http://[::]/", Refused),
        ("http://10.0.0.5/v1", Refused),
        ("ftp://127.0.0.1/", Refused),
        ("file:///etc/passwd", Refused),
        ("http://[::1/v1", Refused),
        ("127.0.0.1:8080/v1", Refused),
        // A base whose last path segment the probe strips still names its host.
        ("http:/v1", Refused),
    ];

    fn loopback_only() -> ProviderSettings {
        ProviderSettings::default()
    }

    /// The host the HTTP client connects to for `url`, by its own request builder.
    fn client_host(client: &reqwest::Client, url: &str) -> String {
        let request = client
            .post(url)
            .build()
            .expect("the client accepts the URL");
        request.url().host_str().expect("a host").to_string()
    }

    fn client() -> reqwest::Client {
        // reqwest is built without a crypto provider (as in `http::endpoint`).
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::new()
    }

    #[test]
    fn adhoc_urls_are_allowed_only_when_the_clients_parser_finds_this_machine() {
        let settings = loopback_only();
        for (base, outcome) in CASES {
            let spec = format!("openai-compat:{base}#m");
            match (check(&spec, &settings), outcome) {
                (Ok(ModelSpec::OpenAiCompat { base_url, .. }), Allowed(_)) => {
                    assert_eq!(&base_url, base);
                }
                (Err(AgentError::NotAllowed { .. }), Refused) => {}
                (got, _) => panic!("{base}: expected {outcome:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn the_host_checked_is_the_host_the_client_connects_to() {
        let client = client();
        for (base, outcome) in CASES {
            let Allowed(expected) = outcome else {
                continue;
            };
            let checked = Url::parse(base).expect("allowed URLs parse");
            assert_eq!(checked.host_str(), Some(*expected), "{base}");
            let requested = request_urls(base);
            assert_eq!(requested[1], chat_completions_url(base));
            for url in &requested {
                assert_eq!(client_host(&client, url), *expected, "{base}: {url}");
            }
        }
    }

    #[test]
    fn backslash_authorities_are_read_as_the_client_reads_them() {
        let client = client();
        for (base, host) in [
            ("http://203.0.113.9\\@127.0.0.1/v1", "203.0.113.9"),
            ("http://169.254.169.254\\@127.0.0.1/", "169.254.169.254"),
        ] {
            let url = chat_completions_url(base);
            assert_eq!(client_host(&client, &url), host);
            let parsed = Url::parse(&url).expect("parses");
            assert_eq!(
                UrlHost::of(&parsed),
                Some(UrlHost::Ip(host.parse().expect("address")))
            );
            assert!(check_adhoc_url(base, false).is_err(), "{base}");
        }
    }

    #[test]
    fn allowing_adhoc_urls_opens_hosts_but_not_schemes_or_credentials() {
        let open = ProviderSettings {
            allow_adhoc_urls: true,
            ..loopback_only()
        };
        let code = |base: &str| check(&format!("openai-compat:{base}#m"), &open);
        for allowed in [
            "https://gpu.example/v1",
            "http://10.0.0.5:8000/v1",
            "http://203.0.113.9\\@127.0.0.1/v1",
        ] {
            assert!(code(allowed).is_ok(), "{allowed}");
        }
        for refused in [
            "http://user:pw@gpu.example/v1",
            "http://127.0.0.1@203.0.113.9/",
            "ftp://gpu.example/",
            "file:///etc/passwd",
            "not a url",
        ] {
            assert!(
                matches!(code(refused), Err(AgentError::NotAllowed { .. })),
                "{refused}"
            );
        }
    }

    #[test]
    fn hosts_are_told_apart_as_the_parser_serializes_them() {
        let host = |url: &str| UrlHost::of(&Url::parse(url).expect("parses"));
        assert_eq!(
            host("http://LocalHost:1/"),
            Some(UrlHost::Domain("localhost".into()))
        );
        assert_eq!(
            host("http://[::ffff:127.0.0.1]/"),
            Some(UrlHost::Ip("::ffff:127.0.0.1".parse().expect("address")))
        );
        assert_eq!(
            host("http://0x7f.0.0.1/"),
            Some(UrlHost::Ip("127.0.0.1".parse().expect("address")))
        );
        assert_eq!(host("file:///etc/passwd"), None);
    }
}
