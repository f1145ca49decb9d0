//! object_store's and the HTTP client's errors as the library's: this crate owns both
//! clients, so it classes each failure ([`RemoteClass`]) when it builds the [`Error::Remote`]
//! or [`Error::Http`], keeping the client's error as the cause. The error type (in
//! `dsv-format`) knows neither client.
//!
//! [`Error::Remote`]: crate::Error::Remote
//! [`Error::Http`]: crate::Error::Http

use crate::error::{RemoteClass, RemoteFailure};

/// object_store's error, classed ([`classify`]); a "not found" answer stays one for callers
/// asking whether an object is there, whatever its class.
pub fn remote_failure(error: object_store::Error) -> RemoteFailure {
    let not_found = matches!(error, object_store::Error::NotFound { .. });
    let failure = RemoteFailure::new(classify(&error), Box::new(error));
    if not_found {
        failure.answered_not_found()
    } else {
        failure
    }
}

/// The HTTP client's error, classed: an answer with a 4xx status is a refused request (the
/// user's to fix), anything else (5xx, no answer) the network's or the server's.
pub fn http_failure(error: reqwest::Error) -> RemoteFailure {
    let class = if error.status().is_some_and(|s| s.is_client_error()) {
        RemoteClass::Rejected
    } else {
        RemoteClass::Failed
    };
    RemoteFailure::new(class, Box::new(error))
}

/// What object_store's error means. A refusal the user can fix comes first: a missing bucket,
/// no credentials, refused ones; object_store reports these as generic HTTP errors carrying
/// the service's code, so the codes are looked for in the error's text.
///
/// [`RemoteClass::NoCredentials`]: no credentials were found, so object_store asked the EC2
/// instance metadata service (its last resort, `http://169.254.169.254/latest/api/token`, or
/// `AWS_METADATA_ENDPOINT`) and that failed: refused (a 403 where something else answers
/// there) or unreachable (not on a cloud machine). Its failure is no refusal by the remote.
pub fn classify(error: &object_store::Error) -> RemoteClass {
    let text = chain_text(error);
    if text.contains(INSTANCE_METADATA_TOKEN_PATH)
        || text.contains(INSTANCE_METADATA_CREDENTIALS_PATH)
    {
        return RemoteClass::NoCredentials;
    }
    if matches!(
        error,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    ) {
        return RemoteClass::CredentialsRefused;
    }
    let has = |codes: &[&str]| codes.iter().any(|code| text.contains(code));
    if has(&[
        "NoSuchBucket",
        "ContainerNotFound",
        "The specified bucket does not exist",
    ]) {
        return RemoteClass::MissingBucket;
    }
    if has(&[
        "403 Forbidden",
        "401 Unauthorized",
        "AuthorizationFailure",
        "AuthenticationFailed",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AccessDenied",
    ]) {
        return RemoteClass::CredentialsRefused;
    }
    match error {
        object_store::Error::NotFound { .. } => RemoteClass::NotFound,
        object_store::Error::InvalidPath { .. } => RemoteClass::Rejected,
        // `object_store::Error` is `#[non_exhaustive]` (it cannot be listed whole): the rest
        // are the network's and the server's failures.
        _ => RemoteClass::Failed,
    }
}

/// The paths object_store requests from the EC2 instance metadata service for credentials
/// (IMDSv2's token, then the role's credentials), in its errors' texts.
const INSTANCE_METADATA_TOKEN_PATH: &str = "/latest/api/token";
const INSTANCE_METADATA_CREDENTIALS_PATH: &str = "/latest/meta-data/iam/security-credentials";

/// `error`'s text and its causes', concatenated.
fn chain_text(error: &object_store::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, ErrorKind};

    fn remote(source: object_store::Error) -> Error {
        Error::Remote {
            remote: "origin".into(),
            action: "list packs/".into(),
            source: remote_failure(source),
        }
    }

    #[test]
    fn remote_errors_are_classed() {
        // A remote's refusal is the user's to fix; its failure is the network's.
        let not_found = || object_store::Error::NotFound {
            path: "packs/x".into(),
            source: "gone".into(),
        };
        assert_eq!(remote(not_found()).kind(), ErrorKind::User);
        assert!(remote_failure(not_found()).is_not_found());
        let generic = object_store::Error::Generic {
            store: "S3",
            source: "connection refused".into(),
        };
        assert_eq!(remote(generic).kind(), ErrorKind::Io);
        let bucket = object_store::Error::Generic {
            store: "S3",
            source: "NoSuchBucket".into(),
        };
        assert_eq!(classify(&bucket), RemoteClass::MissingBucket);
        assert_eq!(remote(bucket).kind(), ErrorKind::User);
        // A 404 naming a missing bucket is that, and still a "not found" answer.
        let missing = object_store::Error::NotFound {
            path: "refs/heads/x".into(),
            source: "404 Not Found: <Code>NoSuchBucket</Code>".into(),
        };
        let failure = remote_failure(missing);
        assert_eq!(failure.class(), RemoteClass::MissingBucket);
        assert!(failure.is_not_found());
        let invalid = object_store::Error::InvalidPath {
            source: object_store::path::Error::EmptySegment {
                path: "a//b".into(),
            },
        };
        assert_eq!(remote(invalid).kind(), ErrorKind::User);
        // The backend's own words are the causes, as when its error was the variant's.
        let error = remote(object_store::Error::Generic {
            store: "S3",
            source: "connection refused".into(),
        });
        assert_eq!(
            crate::error::causes(&error),
            ["Generic S3 error: connection refused"]
        );
    }

    #[test]
    fn no_credentials_is_told_from_refused_ones() {
        // object_store's shape when the instance metadata service, its last resort, answers
        // 403: a generic S3 error naming the token URL, with the status in its text.
        let metadata = object_store::Error::Generic {
            store: "S3",
            source: "Error performing PUT http://169.254.169.254/latest/api/token in 1.2ms - Server returned non-2xx status code: 403 Forbidden: ".into(),
        };
        assert_eq!(classify(&metadata), RemoteClass::NoCredentials);
        let hint = &remote(metadata).hints()[0];
        assert!(hint.starts_with("no AWS credentials were found"), "{hint}");
        assert!(!hint.contains("refused"), "{hint}");
        // Unreachable (not on a cloud machine): the same.
        let unreachable = object_store::Error::Generic {
            store: "S3",
            source: "Error performing GET http://169.254.169.254/latest/meta-data/iam/security-credentials/ in 5s - error sending request".into(),
        };
        assert_eq!(classify(&unreachable), RemoteClass::NoCredentials);
        // The service refusing credentials it was given.
        let refused = object_store::Error::Generic {
            store: "S3",
            source: "Server returned non-2xx status code: 403 Forbidden: <Code>InvalidAccessKeyId</Code>".into(),
        };
        assert_eq!(classify(&refused), RemoteClass::CredentialsRefused);
    }
}
