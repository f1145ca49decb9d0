//! Redaction of credentials in URLs: one rule for every place a URL is shown.
//!
//! A URL's password (`user:password@`; a lone user name, which is often a token, too) and
//! the query parameters that carry a signature, a credential or a token (a presigned S3 or
//! GCS URL, an Azure SAS) are replaced by [`REDACTED`]; the scheme, host, path and other
//! parameters are kept, so the URL still says what it names. [`url`] redacts one URL,
//! [`text`] every URL inside a message. Error messages ([`crate::Error`]'s display, and the
//! CLI's rendering of every error, its causes and hints) go through [`text`]; remote URLs
//! holding what [`credentials_in`] finds are refused, never recorded
//! (`dsv_store::remote_url::check_url`).

/// What a secret is replaced by.
pub const REDACTED: &str = "REDACTED";

/// Query parameters (compared without case) that carry a signature, a credential, a token,
/// or are part of an Azure shared access signature.
const SECRET_PARAMETERS: &[&str] = &[
    // AWS Signature V4 (presigned S3 URLs).
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    // AWS Signature V2, CloudFront.
    "signature",
    "awsaccesskeyid",
    "key-pair-id",
    "policy",
    // Google Cloud Storage V4 signing.
    "x-goog-signature",
    "x-goog-credential",
    "x-goog-security-token",
    "googleaccessid",
    // Azure shared access signature.
    "sig",
    "se",
    "sp",
    "sv",
    "sr",
    "st",
    "spr",
    "skoid",
    "sktid",
    "skt",
    "ske",
    "sks",
    "skv",
    "saoid",
    "suoid",
    // Generic.
    "key",
    "apikey",
    "code",
    "auth",
    "authorization",
];

/// True when a query parameter named `name` (percent-decoded) carries a secret: one of the
/// known names, or any name holding `token`, `secret`, `password`, `passwd`, `signature`,
/// `credential` or `api_key`/`api-key`.
pub(crate) fn is_secret_parameter(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_PARAMETERS.contains(&name.as_str())
        || [
            "token",
            "secret",
            "password",
            "passwd",
            "signature",
            "credential",
            "api_key",
            "api-key",
        ]
        .iter()
        .any(|part| name.contains(part))
}

/// True when `text` is (or holds, after any `://`) a URL with a user name or password, read
/// as [`url`] reads one: a password holding `/` or `#` counts too.
pub fn has_userinfo(text: &str) -> bool {
    text.match_indices("://")
        .any(|(at, _)| Parts::split(&text[at..]).is_some_and(|parts| parts.userinfo.is_some()))
}

/// What in `url` is a credential, in words (`None` when nothing is): a user name or
/// password, or a query parameter that carries a signature, credential or token.
pub fn credentials_in(url: &str) -> Option<String> {
    let parts = Parts::split(url)?;
    if parts.userinfo.is_some() {
        return Some("the URL holds a user name or password".into());
    }
    let secret: Vec<String> = parts
        .query
        .into_iter()
        .flat_map(|q| query_pairs(q).map(|(pair, _)| pair))
        .map(|pair| percent_decode(pair.split('=').next().unwrap_or("")))
        .filter(|name| is_secret_parameter(name))
        .collect();
    if secret.is_empty() {
        None
    } else {
        Some(format!(
            "the URL's query holds a signature, credential or token ({}): a presigned URL or a shared access signature",
            secret.join(", ")
        ))
    }
}

/// `url` with its password (or lone user name) and every secret-bearing query parameter's
/// value replaced by [`REDACTED`]. Text that is not a `SCHEME://` URL is returned as it is.
pub fn url(url: &str) -> String {
    let Some(parts) = Parts::split(url) else {
        return url.to_string();
    };
    let mut out = String::with_capacity(url.len());
    out.push_str(parts.scheme);
    out.push_str("://");
    if let Some(userinfo) = parts.userinfo {
        match userinfo.split_once(':') {
            Some((user, _)) => {
                out.push_str(user);
                out.push(':');
                out.push_str(REDACTED);
            }
            None => out.push_str(REDACTED),
        }
        out.push('@');
    }
    out.push_str(parts.host);
    out.push_str(parts.path);
    // The query, and the fragment too (`#access_token=…` carries tokens in OAuth's
    // implicit flow, and a fragment is echoed in messages though never sent).
    for (mark, part) in [('?', parts.query), ('#', parts.fragment)] {
        let Some(part) = part else { continue };
        out.push(mark);
        for (pair, separator) in query_pairs(part) {
            let name = pair.split('=').next().unwrap_or("");
            if pair.contains('=') && is_secret_parameter(&percent_decode(name)) {
                out.push_str(name);
                out.push('=');
                out.push_str(REDACTED);
            } else {
                out.push_str(pair);
            }
            out.push_str(separator);
        }
    }
    out
}

/// The `name=value` pairs of a query, each with the separator that follows it (`&`, or `;`
/// as HTML 4 allowed and some servers accept; `""` after the last).
pub(crate) fn query_pairs(query: &str) -> impl Iterator<Item = (&str, &str)> {
    query
        .split_inclusive(['&', ';'])
        .map(|piece| match piece.strip_suffix(['&', ';']) {
            Some(pair) => (pair, &piece[pair.len()..]),
            None => (piece, ""),
        })
}

/// `text` with every `SCHEME://…` URL in it passed through [`url`]. A URL ends at white
/// space, a quote, `<`, `>`, `` ` ``, a backslash or the end; a `)`, `.`, `,`, `;` or `:`
/// ending it is taken as the sentence's, not the URL's.
pub fn text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let start = rest[..at]
            .char_indices()
            .rev()
            .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |(i, c)| i + c.len_utf8());
        if start == at {
            // No scheme before it: not a URL.
            out.push_str(&rest[..at + 3]);
            rest = &rest[at + 3..];
            continue;
        }
        let end = rest[at + 3..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`' | '\\'))
            .map_or(rest.len(), |i| at + 3 + i);
        let mut candidate = &rest[start..end];
        while candidate.len() > at - start + 3 && candidate.ends_with([')', '.', ',', ';', ':']) {
            candidate = &candidate[..candidate.len() - 1];
        }
        out.push_str(&rest[..start]);
        out.push_str(&url(candidate));
        rest = &rest[start + candidate.len()..];
    }
    out.push_str(rest);
    out
}

/// The secrets of a command-line argument that is, or looks like, a URL with user
/// information: `scheme:` with any number of slashes (`https://`, a mistyped `http:/` or
/// `http:`), then `user:password@` or `token@`. Returns what a message must never show, longest
/// first: `user:password` and the password (or the lone user name), each at least 4 bytes
/// (a shorter one is only the `user:password` form, which cannot be mistaken for other
/// words); empty when the argument holds none. A front end redacts these from every message
/// that could echo the argument, whole or cut (`invalid dataset name "https://u:PW"`), as
/// [`text`] cannot recognize a URL cut before its `@`.
pub fn argument_secrets(argument: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    let mut rest = argument;
    while let Some(colon) = rest.find(':') {
        let scheme = &rest[..colon];
        let scheme = &scheme[scheme
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1)..];
        let after = rest[colon + 1..].trim_start_matches('/');
        rest = &rest[colon + 1..];
        if scheme.is_empty() || !scheme.starts_with(|c: char| c.is_ascii_alphabetic()) {
            continue;
        }
        // The user information starts after the slashes and ends at the first `@`; as
        // [`url`] reads it, it holds no `/`, `?` or `#` unless it is `user:password` (a
        // hand-typed password may hold them), and no white space.
        let Some((userinfo, _)) = after.split_once('@') else {
            continue;
        };
        let plain = !userinfo.contains(['/', '?', '#'])
            || userinfo
                .split_once(':')
                .is_some_and(|(user, _)| !user.is_empty() && !user.contains(['/', '?', '#']));
        if userinfo.is_empty() || userinfo.contains(char::is_whitespace) || !plain {
            continue;
        }
        let secret = match userinfo.split_once(':') {
            Some((user, password)) => {
                if !password.is_empty() {
                    secrets.push(userinfo.to_string());
                }
                if user.is_empty() { userinfo } else { password }
            }
            None => userinfo,
        };
        if secret.len() >= 4 {
            secrets.push(secret.to_string());
        }
    }
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.dedup();
    secrets
}

/// `message` with every one of `secrets` ([`argument_secrets`]) replaced by [`REDACTED`] (a
/// `user:password` keeps its `user:`), then passed through [`text`].
pub fn with_secrets(message: &str, secrets: &[String]) -> String {
    let mut out = message.to_string();
    for secret in secrets {
        let replacement = match secret.split_once(':') {
            Some((user, _)) if !user.is_empty() => format!("{user}:{REDACTED}"),
            _ => REDACTED.to_string(),
        };
        out = out.replace(secret.as_str(), &replacement);
    }
    text(&out)
}

/// A URL fit to record (in a version's source, message and provenance, all of which a push
/// copies to a remote): without its user information and without the query parameters that
/// carry credentials, signatures or tokens (`is_secret_parameter`: presigned S3, GCS signed
/// URLs, Azure SAS); the other parameters are kept, so a public file's URL still works for
/// `dsv update`. Read as [`url`] reads a URL. Returns the URL and whether anything was
/// removed; text that is not a `SCHEME://` URL is returned as it is.
pub fn for_record(url: &str) -> (String, bool) {
    let Some(parts) = Parts::split(url) else {
        return (url.to_string(), false);
    };
    let mut redacted = parts.userinfo.is_some();
    let mut out = format!("{}://{}{}", parts.scheme, parts.host, parts.path);
    // The query's secret parameters go, and the fragment's (`#access_token=…`): a recorded
    // URL travels with every push.
    for (mark, part) in [('?', parts.query), ('#', parts.fragment)] {
        let Some(part) = part else { continue };
        let kept: Vec<&str> = query_pairs(part)
            .map(|(pair, _)| pair)
            .filter(|pair| {
                let secret = pair.contains('=')
                    && is_secret_parameter(&percent_decode(pair.split('=').next().unwrap_or("")));
                redacted |= secret;
                !secret
            })
            .collect();
        if !kept.is_empty() {
            out.push(mark);
            out.push_str(&kept.join("&"));
        }
    }
    (out, redacted)
}

/// A URL's parts: `scheme://[userinfo@]host path[?query][#fragment]`.
struct Parts<'a> {
    scheme: &'a str,
    userinfo: Option<&'a str>,
    host: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

impl<'a> Parts<'a> {
    fn split(url: &'a str) -> Option<Parts<'a>> {
        let (scheme, rest) = url.split_once("://")?;
        // A password holding `/`, `?` or `#` (not percent-encoded, as a hand-typed URL has
        // it) would end the authority early and hide the `@`: a `user:…@` before the first
        // `@` counts as user information wherever the `@` is.
        let (userinfo, rest) = match rest.split_once('@') {
            Some((userinfo, after))
                if !userinfo.contains(char::is_whitespace)
                    && !userinfo.contains(['/', '?', '#'])
                    || !userinfo.contains(char::is_whitespace)
                        && userinfo.split_once(':').is_some_and(|(user, _)| {
                            !user.is_empty() && !user.contains(['/', '?', '#'])
                        }) =>
            {
                (Some(userinfo), after)
            }
            _ => (None, rest),
        };
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (host, tail) = rest.split_at(authority_end);
        let (before_fragment, fragment) = match tail.split_once('#') {
            Some((before, fragment)) => (before, Some(fragment)),
            None => (tail, None),
        };
        let (path, query) = match before_fragment.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (before_fragment, None),
        };
        Some(Parts {
            scheme,
            userinfo,
            host,
            path,
            query,
            fragment,
        })
    }
}

/// `text` with `%XX` escapes decoded (bytes that do not make UTF-8 are replaced).
pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_urls_lose_credentials_and_signatures_only() {
        assert_eq!(
            for_record(
                "https://u:p@h:8/a/f.zip?X-Amz-Signature=s&a=1&x-amz-security-token=t&X%2DAmz%2DCredential=c#frag"
            ),
            ("https://h:8/a/f.zip?a=1#frag".to_string(), true)
        );
        assert_eq!(
            for_record("https://acct.blob.core.windows.net/c/f?sv=2024&sig=abc&se=x&comp=list"),
            (
                "https://acct.blob.core.windows.net/c/f?comp=list".to_string(),
                true
            )
        );
        // Tokens under any name (one list: crate::redact::is_secret_parameter).
        assert_eq!(
            for_record("https://h/f?access_token=t&page=2&api_key=k"),
            ("https://h/f?page=2".to_string(), true)
        );
        // `;` separates parameters too.
        assert_eq!(
            for_record("https://h/x.txt?a=1;X-Amz-Signature=S"),
            ("https://h/x.txt?a=1".to_string(), true)
        );
        assert_eq!(
            for_record("https://h/cb#access_token=T&state=s"),
            ("https://h/cb#state=s".to_string(), true)
        );
        assert_eq!(
            for_record("https://h/doc#section-2"),
            ("https://h/doc#section-2".to_string(), false)
        );
        assert_eq!(
            for_record("https://h/f?X-Goog-Signature=s"),
            ("https://h/f".to_string(), true)
        );
        assert_eq!(
            for_record("https://h/user@x/f?signed=1"),
            ("https://h/user@x/f?signed=1".to_string(), false)
        );
    }

    #[test]
    fn a_password_holding_a_slash_or_a_hash_is_redacted_whole() {
        assert_eq!(
            url("https://user:pa#ss@127.0.0.1:1/f.bin"),
            "https://user:REDACTED@127.0.0.1:1/f.bin"
        );
        assert_eq!(
            url("s3://AKIA:se/cret@bucket/p"),
            "s3://AKIA:REDACTED@bucket/p"
        );
        assert!(credentials_in("s3://AKIA:se/cret@bucket/p").is_some());
        // An `@` in a path is no user information.
        assert_eq!(url("https://h/user@x/f"), "https://h/user@x/f");
        assert!(credentials_in("https://h/user@x/f").is_none());
        assert!(has_userinfo("s3://AKIA:se/cret@bucket/p"));
        assert!(has_userinfo("http://proxy.local:3128 and http://u:p@h"));
        assert!(!has_userinfo(
            "http://proxy.local:3128 (ask admin@example.com)"
        ));
        assert!(!has_userinfo("https://h/user@x/f"));
    }

    #[test]
    fn semicolons_and_fragments_are_redacted_too() {
        assert_eq!(
            url("http://h/x.txt?a=1;X-Amz-Signature=S"),
            "http://h/x.txt?a=1;X-Amz-Signature=REDACTED"
        );
        assert_eq!(
            url("https://h/cb#access_token=T&state=s"),
            "https://h/cb#access_token=REDACTED&state=s"
        );
        assert_eq!(url("https://h/doc#section-2"), "https://h/doc#section-2");
        assert!(credentials_in("s3://b/p?x=1;sig=abc").is_some());
    }

    #[test]
    fn passwords_and_signatures_are_replaced_and_the_rest_kept() {
        assert_eq!(
            url("https://me:pw@host:8/a/b?X-Amz-Signature=s&v=2&X%2DAmz%2DCredential=c#f"),
            "https://me:REDACTED@host:8/a/b?X-Amz-Signature=REDACTED&v=2&X%2DAmz%2DCredential=REDACTED#f"
        );
        assert_eq!(
            url("https://ghp_TOKEN@github.com/x"),
            "https://REDACTED@github.com/x"
        );
        assert_eq!(
            url("az://c/p?sv=1&se=2&sr=c&sp=r&sig=S&comp=list"),
            "az://c/p?sv=REDACTED&se=REDACTED&sr=REDACTED&sp=REDACTED&sig=REDACTED&comp=list"
        );
        assert_eq!(
            url("https://h/f?access_token=t&x-goog-signature=g&page=1"),
            "https://h/f?access_token=REDACTED&x-goog-signature=REDACTED&page=1"
        );
        assert_eq!(url("s3://bucket/prefix"), "s3://bucket/prefix");
        assert_eq!(url("not a url"), "not a url");
    }

    #[test]
    fn arguments_that_look_like_urls_with_passwords_give_their_secrets() {
        for argument in [
            "https://u:PWsecret@h/x",
            "http:/user:PWsecret@host/p",
            "http:user:PWsecret@host/p",
            "s3://user:PWsecret@bucket/a/b@c",
        ] {
            let secrets = argument_secrets(argument);
            assert!(
                secrets.contains(&"PWsecret".to_string()),
                "{argument}: {secrets:?}"
            );
            for message in [
                format!(
                    "invalid dataset name \"{}\"",
                    &argument[..argument.find('@').unwrap()]
                ),
                format!("unexpected argument '{argument}' found"),
                format!("{argument} is not a directory"),
            ] {
                let redacted = with_secrets(&message, &secrets);
                assert!(!redacted.contains("PWsecret"), "{redacted}");
                assert!(redacted.contains(REDACTED), "{redacted}");
            }
        }
        assert_eq!(argument_secrets("https://TOKEN123@h/x"), ["TOKEN123"]);
        assert_eq!(argument_secrets("https://u:pw@h/x"), ["u:pw"]);
        for plain in [
            "mnist@v1",
            "mnist@v1:a/b",
            "s3://bucket/x",
            "/data/a@b",
            "a:b",
        ] {
            assert!(argument_secrets(plain).is_empty(), "{plain}");
        }
    }

    #[test]
    fn every_url_in_a_message_is_redacted() {
        assert_eq!(
            text(r#"invalid remote URL "s3://u:p@b/x": bad; see (https://h/?sig=1)."#),
            r#"invalid remote URL "s3://u:REDACTED@b/x": bad; see (https://h/?sig=REDACTED)."#
        );
        assert_eq!(
            text("error sending request for url (http://u:p@127.0.0.1:1/f?X-Amz-Signature=abc)"),
            "error sending request for url (http://u:REDACTED@127.0.0.1:1/f?X-Amz-Signature=REDACTED)"
        );
        assert_eq!(text("a :// b and x://"), "a :// b and x://");
        assert_eq!(text("no url here"), "no url here");
        assert_eq!(
            text("é://x é:// «s3://u:p@b»"),
            "é://x é:// «s3://u:REDACTED@b»"
        );
    }

    #[test]
    fn credentials_are_found_by_what_they_are() {
        assert!(credentials_in("s3://b/p").is_none());
        assert!(credentials_in("s3://b/p?versionId=3").is_none());
        assert!(credentials_in("s3://u@b/p").is_some());
        assert!(credentials_in("s3://b/p?X-Amz-Signature=x").is_some());
        assert!(credentials_in("az://c/p?sv=1&sig=x").is_some());
        assert!(credentials_in("not a url").is_none());
    }
}
