//! AWS settings read the way the AWS CLI reads them: a named profile from the shared config
//! file (`~/.aws/config`) and the shared credentials file (`~/.aws/credentials`).
//!
//! The format is the AWS CLI's, described in "Configuration and credential file settings"
//! (<https://docs.aws.amazon.com/cli/latest/userguide/cli-configure-files.html>) and in the
//! SDKs' shared reference (<https://docs.aws.amazon.com/sdkref/latest/guide/file-format.html>):
//!
//! - INI sections. In the config file a profile is `[profile NAME]`, and the default profile
//!   is `[default]` (or `[profile default]`); other sections (`[services NAME]`,
//!   `[sso-session NAME]`) are not profiles. In the credentials file a profile is `[NAME]`.
//! - Where both files name a setting of the profile, the credentials file wins.
//! - Lines starting with `#` or `;` are comments; keys are case-insensitive.
//! - A key with an empty value followed by indented lines is a sub-section:
//!   `s3 =` then `  addressing_style = path`. Of those dsv reads `s3.addressing_style`, and
//!   `endpoint_url` in the `s3` sub-section of the `[services NAME]` section a profile names
//!   with `services = NAME`; the rest are parsed and ignored.
//!
//! What is read: `aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`,
//! `region`, `endpoint_url` (unless `ignore_configured_endpoint_urls = true`), the S3
//! service endpoint of its `services` section, and `s3.addressing_style`. They become the
//! `object_store` settings [`AwsProfile::options`] lists. A profile that gets its
//! credentials another way (`credential_process`, SSO, `role_arn` with `source_profile`) is
//! named in [`AwsProfile::unsupported`]: dsv runs no process and performs no login.
//!
//! Precedence follows the AWS CLI: an environment variable (`AWS_ACCESS_KEY_ID`,
//! `AWS_REGION`, `AWS_ENDPOINT_URL`, …) beats the profile's value, and a remote's own
//! `--option` beats both. The library reads the files only where a front end asked it to
//! ([`set_source`]): it never looks at `HOME` or `AWS_PROFILE` itself.
//!
//! Nothing read here is ever written into a store: the values go to the S3 client only.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use crate::error::{Error, IoResultExt, Result};

/// The largest profile file dsv reads, in bytes (1 MiB); a larger one is an error naming it.
pub(crate) const MAX_PROFILE_FILE_LEN: u64 = 1024 * 1024;

/// The profile used when none is named.
pub(crate) const DEFAULT_PROFILE: &str = "default";

/// Where a front end says the AWS settings are: the profile's name and the two files, as
/// the AWS CLI finds them from the environment (`AwsProfileSource::from_environment`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AwsProfileSource {
    /// The profile named by the user (`AWS_PROFILE`); `None` means `default`, and then a
    /// missing profile is no error.
    pub profile: Option<String>,
    /// The shared config file (`AWS_CONFIG_FILE`, else `~/.aws/config`).
    pub config_file: Option<PathBuf>,
    /// The shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`, else
    /// `~/.aws/credentials`).
    pub credentials_file: Option<PathBuf>,
}

impl AwsProfileSource {
    /// The source the AWS CLI would use given these environment values (each `None` when
    /// unset or empty): `AWS_PROFILE` (else the older `AWS_DEFAULT_PROFILE`) names the
    /// profile; `AWS_CONFIG_FILE` and `AWS_SHARED_CREDENTIALS_FILE` override the files
    /// under `HOME/.aws/`. Without `HOME` and without an override, that file is not read.
    pub(crate) fn from_environment(
        home: Option<&Path>,
        aws_profile: Option<&str>,
        aws_default_profile: Option<&str>,
        aws_config_file: Option<&Path>,
        aws_shared_credentials_file: Option<&Path>,
    ) -> AwsProfileSource {
        fn nonempty(s: Option<&str>) -> Option<&str> {
            s.map(str::trim).filter(|s| !s.is_empty())
        }
        let path = |given: Option<&Path>, under_home: &str| {
            given
                .filter(|p| !p.as_os_str().is_empty())
                .map(Path::to_path_buf)
                .or_else(|| home.map(|h| h.join(".aws").join(under_home)))
        };
        AwsProfileSource {
            profile: nonempty(aws_profile)
                .or(nonempty(aws_default_profile))
                .map(str::to_string),
            config_file: path(aws_config_file, "config"),
            credentials_file: path(aws_shared_credentials_file, "credentials"),
        }
    }

    /// As `AwsProfileSource::from_environment`, with each variable looked up by `var` (a
    /// front end passes `|name| std::env::var_os(name)`; the library itself reads no
    /// environment). Unset, empty and non-UTF-8 profile names count as unset.
    pub fn from_variables(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> AwsProfileSource {
        let var = |name: &str| var(name).filter(|v| !v.is_empty());
        let text = |name: &str| var(name).and_then(|v| v.into_string().ok());
        let home = var("HOME").map(PathBuf::from);
        let config_file = var("AWS_CONFIG_FILE").map(PathBuf::from);
        let credentials_file = var("AWS_SHARED_CREDENTIALS_FILE").map(PathBuf::from);
        AwsProfileSource::from_environment(
            home.as_deref(),
            text("AWS_PROFILE").as_deref(),
            text("AWS_DEFAULT_PROFILE").as_deref(),
            config_file.as_deref(),
            credentials_file.as_deref(),
        )
    }

    /// The profile's name: the one given, else `default`.
    pub(crate) fn profile_name(&self) -> &str {
        self.profile.as_deref().unwrap_or(DEFAULT_PROFILE)
    }

    /// Reads the two files (each at most `MAX_PROFILE_FILE_LEN` bytes; a missing one counts
    /// as empty) and resolves the profile with [`resolve`].
    ///
    /// # Errors
    /// [`Error::AwsProfileFile`] for a file that is too large, not UTF-8 or does not parse;
    /// [`Error::Io`] when a file exists but cannot be read; [`Error::AwsProfileNotFound`] as
    /// [`resolve`].
    pub fn load(&self) -> Result<AwsProfile> {
        let config = read_bounded(self.config_file.as_deref())?;
        let credentials = read_bounded(self.credentials_file.as_deref())?;
        resolve(
            self.config_file.as_deref().zip(config.as_deref()),
            self.credentials_file.as_deref().zip(credentials.as_deref()),
            self.profile_name(),
            self.profile.is_some(),
        )
        .map_err(|e| match e {
            Error::AwsProfileNotFound { profile, .. } => Error::AwsProfileNotFound {
                profile,
                files: self.describe_files(config.is_some(), credentials.is_some()),
            },
            other => other,
        })
    }

    fn describe_files(&self, config_found: bool, credentials_found: bool) -> Vec<String> {
        [
            (&self.config_file, config_found),
            (&self.credentials_file, credentials_found),
        ]
        .into_iter()
        .filter_map(|(path, found)| {
            path.as_ref().map(|p| {
                let suffix = if found { "" } else { " (not found)" };
                format!("{}{suffix}", p.display())
            })
        })
        .collect()
    }
}

/// What a profile sets, as `object_store` S3 settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AwsProfile {
    /// The profile's name.
    pub name: String,
    /// `object_store` configuration keys and values: `aws_access_key_id`,
    /// `aws_secret_access_key`, `aws_session_token`, `aws_region`, `aws_endpoint` (with
    /// `aws_allow_http` = `true` when it is an `http://` URL),
    /// `aws_virtual_hosted_style_request`; only those the profile sets.
    pub options: BTreeMap<String, String>,
    /// How the profile gets credentials that dsv cannot use (`credential_process`,
    /// `sso_session`, `role_arn` …), when it has no static keys; `None` otherwise.
    pub unsupported: Option<String>,
}

impl AwsProfile {
    /// True when the profile gives static credentials (an access key id and a secret).
    pub(crate) fn has_credentials(&self) -> bool {
        self.options.contains_key("aws_access_key_id")
            && self.options.contains_key("aws_secret_access_key")
    }
}

/// The two kinds of file, whose profile sections are named differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    Config,
    Credentials,
}

/// One parsed file: section name → key (lower case) → value.
type Sections = BTreeMap<String, BTreeMap<String, String>>;

/// Resolves profile `name` from the texts of the config and credentials files (each with
/// its path, for messages; `None` when there is no such file). Pure: reads nothing.
///
/// `explicit` says the user named the profile (`AWS_PROFILE`): then a profile in neither
/// file is an error, as it is for the AWS CLI; the implicit `default` may be absent (the
/// result then has no options).
///
/// # Errors
/// [`Error::AwsProfileFile`] for a file that does not parse (with its line);
/// [`Error::AwsProfileNotFound`] for a named profile that neither file has.
pub fn resolve(
    config: Option<(&Path, &str)>,
    credentials: Option<(&Path, &str)>,
    name: &str,
    explicit: bool,
) -> Result<AwsProfile> {
    let config_sections = config
        .map(|(path, text)| parse(path, text))
        .transpose()?
        .unwrap_or_default();
    let credential_sections = credentials
        .map(|(path, text)| parse(path, text))
        .transpose()?
        .unwrap_or_default();
    let from_config = profile_section(&config_sections, FileKind::Config, name);
    let from_credentials = profile_section(&credential_sections, FileKind::Credentials, name);
    if from_config.is_none() && from_credentials.is_none() {
        if explicit {
            return Err(Error::AwsProfileNotFound {
                profile: name.to_string(),
                files: [config, credentials]
                    .into_iter()
                    .flatten()
                    .map(|(path, _)| path.display().to_string())
                    .collect(),
            });
        }
        return Ok(AwsProfile {
            name: name.to_string(),
            ..AwsProfile::default()
        });
    }
    // The credentials file's values win over the config file's (botocore merges them so).
    let mut settings = from_config.cloned().unwrap_or_default();
    settings.extend(from_credentials.cloned().unwrap_or_default());

    let mut options = BTreeMap::new();
    let mut put = |key: &str, value: Option<&String>| {
        if let Some(value) = value.map(|v| v.trim()).filter(|v| !v.is_empty()) {
            options.insert(key.to_string(), value.to_string());
        }
    };
    put("aws_access_key_id", settings.get("aws_access_key_id"));
    put(
        "aws_secret_access_key",
        settings.get("aws_secret_access_key"),
    );
    // aws_security_token is the older name the AWS CLI still accepts.
    put(
        "aws_session_token",
        settings
            .get("aws_session_token")
            .or(settings.get("aws_security_token")),
    );
    put("aws_region", settings.get("region"));
    let ignore_endpoints = settings
        .get("ignore_configured_endpoint_urls")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if !ignore_endpoints {
        // A service-specific endpoint (`services = NAME`, then `[services NAME]` with
        // `s3 =` / `endpoint_url = …`) beats the profile's global one.
        let s3_endpoint = settings.get("services").and_then(|services| {
            config_sections
                .get(&format!("services {}", services.trim()))
                .and_then(|section| section.get("s3"))
                .and_then(|nested| parse_nested(nested).remove("endpoint_url"))
        });
        let endpoint = s3_endpoint.as_ref().or(settings.get("endpoint_url"));
        put("aws_endpoint", endpoint);
        // The AWS CLI takes an http:// endpoint as it is written; object_store refuses
        // plain HTTP unless told (a local server: moto, MinIO, LocalStack).
        if endpoint.is_some_and(|e| e.trim().to_ascii_lowercase().starts_with("http://")) {
            put("aws_allow_http", Some(&"true".into()));
        }
    }
    let addressing = settings
        .get("s3")
        .and_then(|nested| parse_nested(nested).remove("addressing_style"));
    match addressing.as_deref().map(str::trim) {
        Some("path") => put("aws_virtual_hosted_style_request", Some(&"false".into())),
        Some("virtual") => put("aws_virtual_hosted_style_request", Some(&"true".into())),
        _ => {}
    }
    let mut profile = AwsProfile {
        name: name.to_string(),
        options,
        unsupported: None,
    };
    if !profile.has_credentials() {
        profile.unsupported = [
            "credential_process",
            "sso_session",
            "sso_start_url",
            "source_profile",
            "credential_source",
            "role_arn",
            "web_identity_token_file",
            "login_session",
        ]
        .into_iter()
        .find(|key| settings.contains_key(*key))
        .map(str::to_string);
    }
    Ok(profile)
}

/// The profile's section in one file: `[profile NAME]` (or `[default]` for the default) in
/// the config file, `[NAME]` in the credentials file.
fn profile_section<'a>(
    sections: &'a Sections,
    kind: FileKind,
    name: &str,
) -> Option<&'a BTreeMap<String, String>> {
    match kind {
        FileKind::Credentials => sections.get(name),
        FileKind::Config => sections.get(&format!("profile {name}")).or_else(|| {
            (name == DEFAULT_PROFILE)
                .then(|| sections.get(name))
                .flatten()
        }),
    }
}

/// Parses one file into sections; section names have their inner runs of white space
/// collapsed (`[profile  dev ]` is `profile dev`), keys are lower-cased. A section that
/// appears twice is merged, the later value winning.
fn parse(path: &Path, text: &str) -> Result<Sections> {
    let options = ini::ParseOption {
        enabled_quote: false,
        enabled_escape: false,
        enabled_indented_mutiline_value: true,
        enabled_preserve_key_leading_whitespace: false,
    };
    // Comment lines may be indented (botocore strips them); the INI parser only accepts a
    // comment at the start of a line, and would take an indented one after `s3 =` for part
    // of that value: drop them first. Line numbers stay as they were.
    let cleaned: String = text
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with('#') || trimmed.starts_with(';') {
                ""
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let parsed =
        ini::Ini::load_from_str_opt(&cleaned, options).map_err(|e| Error::AwsProfileFile {
            path: path.to_path_buf(),
            line: Some(e.line),
            reason: e.msg.to_string(),
        })?;
    let mut sections = Sections::new();
    for (section, properties) in parsed.iter() {
        let Some(section) = section else {
            // Keys before the first section belong to no profile (botocore ignores them).
            continue;
        };
        let section = section.split_whitespace().collect::<Vec<_>>().join(" ");
        let entry = sections.entry(section).or_default();
        for (key, value) in properties.iter() {
            entry.insert(key.trim().to_ascii_lowercase(), value.to_string());
        }
    }
    Ok(sections)
}

/// A sub-section's value (`s3 =` followed by indented `key = value` lines) as keys (lower
/// case) and values; lines without `=` are skipped.
fn parse_nested(value: &str) -> BTreeMap<String, String> {
    value
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.trim().to_ascii_lowercase(), value.trim().to_string()))
        .filter(|(key, _)| !key.is_empty())
        .collect()
}

/// Reads a profile file of at most [`MAX_PROFILE_FILE_LEN`] bytes; `None` when there is no
/// such file.
fn read_bounded(path: Option<&Path>) -> Result<Option<String>> {
    let Some(path) = path else {
        return Ok(None);
    };
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).at(path),
    };
    let mut bytes = Vec::new();
    file.take(MAX_PROFILE_FILE_LEN + 1)
        .read_to_end(&mut bytes)
        .at(path)?;
    if bytes.len() as u64 > MAX_PROFILE_FILE_LEN {
        return Err(Error::AwsProfileFile {
            path: path.to_path_buf(),
            line: None,
            reason: format!(
                "larger than {} KiB; an AWS profile file is never that large",
                MAX_PROFILE_FILE_LEN / 1024
            ),
        });
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| Error::AwsProfileFile {
            path: path.to_path_buf(),
            line: None,
            reason: "not UTF-8 text".into(),
        })
}

/// Where S3 remotes of this process read their profile, as a front end set it; `None` (the
/// default) reads no profile.
static SOURCE: RwLock<Option<AwsProfileSource>> = RwLock::new(None);

/// Tells the library where this process's AWS profile is, for every S3 remote and import it
/// opens from now on (the files are read when one is opened, not now). A front end calls it
/// once at start with what it gathered from its environment; `None` reads no profile.
/// Process-wide, like the `AWS_*` environment variables `object_store` reads.
pub fn set_source(source: Option<AwsProfileSource>) {
    *SOURCE.write().unwrap_or_else(|e| e.into_inner()) = source;
}

/// The source [`set_source`] set, if any.
pub fn source() -> Option<AwsProfileSource> {
    SOURCE.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Applies `profile` to an S3 builder made from the environment, below it: a value the
/// environment already set is kept (the AWS CLI's precedence). The credentials are taken
/// whole from one source: the environment's when it has an access key id and a secret (with
/// its session token, if any), else the profile's key, secret and token together, never a
/// mix (an `AWS_SESSION_TOKEN` alone in the environment is not sent with the profile's keys,
/// as the AWS CLI ignores it too).
pub(crate) fn apply_below_environment(
    mut builder: object_store::aws::AmazonS3Builder,
    profile: &AwsProfile,
) -> object_store::aws::AmazonS3Builder {
    use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey as Key};
    let untouched = AmazonS3Builder::new();
    let is_default = |builder: &AmazonS3Builder, key: &Key| {
        builder.get_config_value(key) == untouched.get_config_value(key)
    };
    let env_has_credentials =
        !is_default(&builder, &Key::AccessKeyId) && !is_default(&builder, &Key::SecretAccessKey);
    for (key, value) in &profile.options {
        let Ok(parsed) = key.parse::<Key>() else {
            continue;
        };
        let credential = matches!(parsed, Key::AccessKeyId | Key::SecretAccessKey | Key::Token);
        let keep_environment = if credential {
            env_has_credentials
        } else if parsed == Key::Endpoint {
            // AWS_ENDPOINT_URL_S3 is the environment's endpoint too.
            !is_default(&builder, &Key::Endpoint) || !is_default(&builder, &Key::S3Endpoint)
        } else {
            !is_default(&builder, &parsed)
        };
        if !keep_environment {
            builder = builder.with_config(parsed, value);
        }
    }
    // The profile's set as one provider, which wins over the builder's separate key, secret
    // and token (a token the environment set alone cannot be unset there).
    if !env_has_credentials
        && let (Some(key_id), Some(secret_key)) = (
            profile.options.get("aws_access_key_id"),
            profile.options.get("aws_secret_access_key"),
        )
    {
        builder = builder.with_credentials(std::sync::Arc::new(
            object_store::StaticCredentialProvider::new(object_store::aws::AwsCredential {
                key_id: key_id.clone(),
                secret_key: secret_key.clone(),
                token: profile.options.get("aws_session_token").cloned(),
            }),
        ));
    }
    builder
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey as Key};

    fn config(text: &str) -> Option<(&'static Path, &str)> {
        Some((Path::new("/home/u/.aws/config"), text))
    }

    fn credentials(text: &str) -> Option<(&'static Path, &str)> {
        Some((Path::new("/home/u/.aws/credentials"), text))
    }

    fn options(profile: &AwsProfile) -> Vec<(&str, &str)> {
        profile
            .options
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn config_profiles_are_profile_sections_and_credentials_profiles_are_bare() {
        let config_text = "\
[default]
region = us-east-1

[profile dev]
region = eu-west-2
endpoint_url = http://127.0.0.1:5391

[dev]
region = ap-south-1
";
        let credentials_text = "\
[dev]
aws_access_key_id = AKIDEV
aws_secret_access_key = dev-secret

[profile dev]
aws_access_key_id = NOT-A-PROFILE-OF-THIS-FILE
";
        let dev = resolve(
            config(config_text),
            credentials(credentials_text),
            "dev",
            true,
        )
        .unwrap();
        assert_eq!(
            options(&dev),
            [
                ("aws_access_key_id", "AKIDEV"),
                ("aws_allow_http", "true"),
                ("aws_endpoint", "http://127.0.0.1:5391"),
                ("aws_region", "eu-west-2"),
                ("aws_secret_access_key", "dev-secret"),
            ]
        );
        let default = resolve(config(config_text), None, "default", false).unwrap();
        assert_eq!(options(&default), [("aws_region", "us-east-1")]);
        // `[profile default]` names the default profile in the config file too.
        let default = resolve(
            config("[profile default]\nregion = eu-north-1\n"),
            None,
            "default",
            false,
        )
        .unwrap();
        assert_eq!(options(&default), [("aws_region", "eu-north-1")]);
    }

    #[test]
    fn the_credentials_file_wins_over_the_config_file() {
        let profile = resolve(
            config("[profile p]\nregion = from-config\naws_access_key_id = CONFIGKEY\naws_secret_access_key = c\n"),
            credentials("[p]\nregion = from-credentials\naws_access_key_id = CREDKEY\n"),
            "p",
            true,
        )
        .unwrap();
        assert_eq!(profile.options["aws_region"], "from-credentials");
        assert_eq!(profile.options["aws_access_key_id"], "CREDKEY");
        assert_eq!(profile.options["aws_secret_access_key"], "c");
    }

    #[test]
    fn comments_case_spacing_and_sub_sections_do_not_break_parsing() {
        let text = "\
# a comment
; another
[ profile   ml ]
Region=us-west-2
  # an indented comment
s3 =
  addressing_style = path
  max_concurrent_requests = 20
AWS_ACCESS_KEY_ID = AKIML
aws_secret_access_key = a#b;c
output = json
";
        let profile = resolve(config(text), None, "ml", true).unwrap();
        assert_eq!(
            options(&profile),
            [
                ("aws_access_key_id", "AKIML"),
                ("aws_region", "us-west-2"),
                // Without inline comments, as botocore reads values.
                ("aws_secret_access_key", "a#b;c"),
                ("aws_virtual_hosted_style_request", "false"),
            ]
        );
        // The sub-section's keys stay in it: no top-level max_concurrent_requests.
        assert!(profile.unsupported.is_none());
    }

    #[test]
    fn a_services_section_gives_the_s3_endpoint_and_it_can_be_ignored() {
        let text = "\
[profile local]
endpoint_url = http://global:1
services = local-s3

[services local-s3]
s3 =
  endpoint_url = http://s3-only:2
dynamodb =
  endpoint_url = http://dynamo:3
";
        let profile = resolve(config(text), None, "local", true).unwrap();
        assert_eq!(profile.options["aws_endpoint"], "http://s3-only:2");
        let ignored = text.replace(
            "services = local-s3",
            "services = local-s3\nignore_configured_endpoint_urls = true",
        );
        let profile = resolve(config(&ignored), None, "local", true).unwrap();
        assert!(!profile.options.contains_key("aws_endpoint"), "{profile:?}");
    }

    #[test]
    fn a_missing_named_profile_is_an_error_naming_it_and_the_files() {
        let err = resolve(
            config("[profile other]\n"),
            credentials("[another]\n"),
            "nope",
            true,
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("\"nope\""), "{text}");
        assert!(text.contains("/home/u/.aws/config"), "{text}");
        assert!(text.contains("/home/u/.aws/credentials"), "{text}");
        // In the config file a bare `[nope]` is not the profile nope.
        assert!(resolve(config("[nope]\nregion = x\n"), None, "nope", true).is_err());
        // The implicit default may be absent.
        let profile = resolve(None, None, "default", false).unwrap();
        assert!(profile.options.is_empty());
    }

    #[test]
    fn a_file_that_does_not_parse_is_an_error_with_its_line() {
        let err = resolve(
            config("[default]\nregion = x\n[broken\n"),
            None,
            "default",
            false,
        )
        .unwrap_err();
        match &err {
            Error::AwsProfileFile { path, line, .. } => {
                assert_eq!(path, Path::new("/home/u/.aws/config"));
                assert_eq!(*line, Some(3), "{err}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn credentials_dsv_cannot_use_are_named() {
        let profile = resolve(
            config("[profile sso]\nsso_session = corp\nregion = us-east-1\n"),
            None,
            "sso",
            true,
        )
        .unwrap();
        assert_eq!(profile.unsupported.as_deref(), Some("sso_session"));
        let profile = resolve(
            config("[profile k]\nrole_arn = arn:x\n"),
            credentials("[k]\naws_access_key_id = A\naws_secret_access_key = B\n"),
            "k",
            true,
        )
        .unwrap();
        assert_eq!(profile.unsupported, None);
    }

    #[test]
    fn files_are_found_as_the_aws_cli_finds_them() {
        let home = Path::new("/home/u");
        let source = AwsProfileSource::from_environment(Some(home), None, None, None, None);
        assert_eq!(source.profile_name(), "default");
        assert_eq!(
            source.config_file.as_deref(),
            Some(Path::new("/home/u/.aws/config"))
        );
        assert_eq!(
            source.credentials_file.as_deref(),
            Some(Path::new("/home/u/.aws/credentials"))
        );
        let source = AwsProfileSource::from_environment(
            Some(home),
            Some(""),
            Some("legacy"),
            Some(Path::new("/etc/aws-config")),
            Some(Path::new("")),
        );
        assert_eq!(source.profile.as_deref(), Some("legacy"));
        assert_eq!(
            source.config_file.as_deref(),
            Some(Path::new("/etc/aws-config"))
        );
        assert_eq!(
            source.credentials_file.as_deref(),
            Some(Path::new("/home/u/.aws/credentials"))
        );
        let source = AwsProfileSource::from_environment(None, Some("p"), None, None, None);
        assert_eq!((source.config_file, source.credentials_file), (None, None));
    }

    #[test]
    fn files_are_read_bounded_and_a_missing_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("config");
        std::fs::write(&big, vec![b'#'; MAX_PROFILE_FILE_LEN as usize + 1]).unwrap();
        let source = AwsProfileSource {
            profile: Some("p".into()),
            config_file: Some(big.clone()),
            credentials_file: Some(dir.path().join("credentials")),
        };
        match source.load().unwrap_err() {
            Error::AwsProfileFile {
                path, line: None, ..
            } => assert_eq!(path, big),
            other => panic!("{other:?}"),
        }
        std::fs::write(&big, "[profile q]\n").unwrap();
        let text = source.load().unwrap_err().to_string();
        assert!(text.contains("credentials (not found)"), "{text}");
        assert!(text.contains(&big.display().to_string()), "{text}");
        std::fs::write(&big, "[profile p]\nregion = r\n").unwrap();
        assert_eq!(source.load().unwrap().options["aws_region"], "r");
    }

    /// The credential a store built from `builder` signs with.
    fn credential_of(builder: AmazonS3Builder) -> std::sync::Arc<object_store::aws::AwsCredential> {
        let store = builder
            .with_bucket_name("b")
            .with_region("us-east-1")
            .build()
            .unwrap();
        let provider = store.credentials().clone();
        let mut future = std::pin::pin!(provider.get_credential());
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut context) {
            std::task::Poll::Ready(credential) => credential.unwrap(),
            std::task::Poll::Pending => panic!("a static credential is ready at once"),
        }
    }

    #[test]
    fn the_environment_wins_over_the_profile() {
        let profile = AwsProfile {
            name: "p".into(),
            options: [
                ("aws_access_key_id", "PROFILEKEY"),
                ("aws_secret_access_key", "profile-secret"),
                ("aws_session_token", "profile-token"),
                ("aws_region", "profile-region"),
                ("aws_endpoint", "http://profile:1"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            unsupported: None,
        };
        // As if the environment had AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_REGION.
        let from_env = AmazonS3Builder::new()
            .with_config(Key::AccessKeyId, "ENVKEY")
            .with_config(Key::SecretAccessKey, "env-secret")
            .with_config(Key::Region, "env-region");
        let built = apply_below_environment(from_env, &profile);
        assert_eq!(
            built.get_config_value(&Key::AccessKeyId).as_deref(),
            Some("ENVKEY")
        );
        assert_eq!(
            built.get_config_value(&Key::SecretAccessKey).as_deref(),
            Some("env-secret")
        );
        // The profile's token belongs to the profile's key: not mixed with the environment's.
        assert_eq!(built.get_config_value(&Key::Token), None);
        assert_eq!(
            built.get_config_value(&Key::Region).as_deref(),
            Some("env-region")
        );
        assert_eq!(
            built.get_config_value(&Key::Endpoint).as_deref(),
            Some("http://profile:1")
        );
        // An empty environment takes everything from the profile.
        let built = apply_below_environment(AmazonS3Builder::new(), &profile);
        assert_eq!(
            built.get_config_value(&Key::AccessKeyId).as_deref(),
            Some("PROFILEKEY")
        );
        assert_eq!(
            built.get_config_value(&Key::Token).as_deref(),
            Some("profile-token")
        );
        assert_eq!(
            built.get_config_value(&Key::Region).as_deref(),
            Some("profile-region")
        );
        // A session token alone in the environment is not sent with the profile's keys.
        let keys_only = AwsProfile {
            options: profile
                .options
                .iter()
                .filter(|(k, _)| *k != "aws_session_token")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            ..profile.clone()
        };
        let from_env = AmazonS3Builder::new().with_config(Key::Token, "env-token");
        let credential = credential_of(apply_below_environment(from_env, &keys_only));
        assert_eq!(credential.key_id, "PROFILEKEY");
        assert_eq!(credential.token, None);
        let from_env = AmazonS3Builder::new().with_config(Key::Token, "env-token");
        let credential = credential_of(apply_below_environment(from_env, &profile));
        assert_eq!(credential.token.as_deref(), Some("profile-token"));
        // A complete set in the environment is used whole, its token with it.
        let from_env = AmazonS3Builder::new()
            .with_config(Key::AccessKeyId, "ENVKEY")
            .with_config(Key::SecretAccessKey, "env-secret")
            .with_config(Key::Token, "env-token");
        let credential = credential_of(apply_below_environment(from_env, &profile));
        assert_eq!(credential.key_id, "ENVKEY");
        assert_eq!(credential.token.as_deref(), Some("env-token"));
        // AWS_ENDPOINT_URL_S3 in the environment keeps the profile's endpoint out.
        let from_env = AmazonS3Builder::new().with_config(Key::S3Endpoint, "http://env-s3:2");
        let built = apply_below_environment(from_env, &profile);
        assert_eq!(built.get_config_value(&Key::Endpoint), None);
    }
}
