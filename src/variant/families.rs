//! The env names a Mutation's token may not set by default (R32, R41): families matched by
//! pattern, so that a name nobody thought to list is refused with its kind. Pure.
//!
//! A name is compared as [`env_key`] reads it (upper case, `-` and `.` as `_`) and split into
//! words at `_`: it is in a family when one of its words is one of the family's words, or the
//! whole name matches one of its patterns (`*` for any run of characters). [`STARTUP_ENV`] is
//! a second line of names the families would miss. The owner allows any of them by listing it
//! in `spec.deviceAccess.env`.

use super::totals::glob_match;

/// A kind of variable a token may not set unless the owner lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Family {
    /// What variables of this kind change, for refusals and docs/security.md.
    pub what: &'static str,
    /// A name with one of these words (between `_`) is in the family.
    pub words: &'static [&'static str],
    /// A name that matches one of these patterns is in the family.
    pub patterns: &'static [&'static str],
}

/// The families, in the order refusals name them.
pub const FAMILIES: &[Family] = &[
    Family {
        what: "launcher and runtime options (a JVM's, a launcher's, an interpreter's)",
        words: &[
            "OPTS",
            "OPT",
            "OPTIONS",
            "OPTION",
            "ARGS",
            "ARGV",
            "ARGUMENTS",
            "FLAGS",
            "JAVA",
            "JDK",
            "JVM",
            "CLASSPATH",
        ],
        patterns: &[
            "*OPTS", "*OPTIONS", "*ARGS", "*FLAGS", "JAVA*", "JDK*", "JVM*",
        ],
    },
    Family {
        what: "interpreters' start-up, modules and search paths",
        words: &["LIB", "LIBS", "LIBDIR", "STARTUP", "HOOK", "HOOKS"],
        patterns: &[
            "PATH",
            "*PATH",
            "*PATHS",
            "HOME",
            "*_HOME",
            "PYTHON*",
            "PERL*",
            "RUBY*",
            "LUA*",
            "PHP*",
            "DOTNET*",
            "CORECLR*",
            "COMPLUS*",
            "R_LIBS*",
            "R_PROFILE*",
            "TCL*",
            "ERL*",
            "ELIXIR*",
            "JULIA*",
            "DENO*",
        ],
    },
    Family {
        what: "package indexes, registries and package managers' settings",
        words: &[
            "INDEX",
            "REGISTRY",
            "REGISTRIES",
            "MIRROR",
            "MIRRORS",
            "REPOSITORY",
            "REPOSITORIES",
            "REPO",
            "REPOS",
        ],
        patterns: &[
            "PIP*",
            "UV_*",
            "POETRY*",
            "PIPENV*",
            "PDM_*",
            "CONDA*",
            "MAMBA*",
            "NPM*",
            "YARN*",
            "PNPM*",
            "BUN_*",
            "BUNDLE*",
            "GEM*",
            "CARGO*",
            "RUSTUP*",
            "MAVEN*",
            "MVN*",
            "GRADLE*",
            "SBT*",
            "IVY*",
            "COURSIER*",
            "NUGET*",
            "COMPOSER*",
            "HEX_*",
            "MIX_*",
            "CPAN*",
            "HELM*",
            "APT_*",
            "APK_*",
        ],
    },
    Family {
        what: "proxies",
        words: &["PROXY", "PROXIES"],
        patterns: &["*PROXY"],
    },
    Family {
        what: "TLS trust and verification",
        words: &[
            "CA",
            "CAS",
            "CACERT",
            "CACERTS",
            "CAFILE",
            "CAPATH",
            "CAINFO",
            "CERT",
            "CERTS",
            "CERTIFICATE",
            "CERTIFICATES",
            "TLS",
            "SSL",
            "VERIFY",
            "INSECURE",
            "TRUST",
            "TRUSTSTORE",
            "KEYSTORE",
            "UNAUTHORIZED",
        ],
        patterns: &["SSL*", "OPENSSL*", "GNUTLS*", "NSS_*", "*HTTPSVERIFY"],
    },
    Family {
        what: "the dynamic loader and the C library",
        words: &["PRELOAD"],
        patterns: &["LD_*", "DYLD_*", "GCONV*", "GLIBC*", "LOCPATH"],
    },
    Family {
        what: "git, ssh and gpg (configuration, and commands they run)",
        words: &["ASKPASS"],
        patterns: &["GIT", "GIT_*", "SSH_*", "GNUPG*", "GPG_*"],
    },
    Family {
        what: "shells' start-up files and the commands tools run",
        words: &[
            "SHELL", "EDITOR", "PAGER", "BROWSER", "COMMAND", "CMD", "EXEC", "RC", "RCFILE",
        ],
        patterns: &[
            "ENV",
            "BASH*",
            "ZSH*",
            "ZDOTDIR",
            "KSH*",
            "FISH_*",
            "XDG_*",
            "IFS",
            "PS1",
            "PS2",
            "PS3",
            "PS4",
            "INPUTRC",
            "WGETRC",
            "CURL_HOME",
            "LESS*",
            "VISUAL",
        ],
    },
    Family {
        what: "configuration and credential files read at start, and in-cluster and cloud clients",
        words: &["CONF", "CONFIG", "CREDENTIALS"],
        patterns: &[
            "KUBECONFIG",
            "KUBERNETES_*",
            "AWS_*",
            "AZURE_*",
            "GOOGLE_*",
            "GCLOUD*",
            "CLOUDSDK*",
            "DOCKER_*",
        ],
    },
    Family {
        what: "the resolver",
        words: &["DNS", "NAMESERVER", "NAMESERVERS", "RESOLVER"],
        patterns: &["LOCALDOMAIN", "HOSTALIASES", "RESOLV*", "RES_*"],
    },
    Family {
        what: "runtime debug and trace switches (Go's runtime and toolchain among them)",
        words: &[
            "DEBUG",
            "TRACE",
            "TRACEBACK",
            "INSPECT",
            "PROFILE",
            "PROFILER",
            "PROFILING",
            "COVERAGE",
        ],
        patterns: &["GO*", "NODE_V8*", "NODE_REPL*", "V8_*", "DEBUGINFOD*"],
    },
];

/// The second line: variables that change how a process loads or starts which the families
/// do not all catch by pattern, each named. A trailing `*` stands for any rest of the name.
pub const STARTUP_ENV: &[&str] = &[
    "LD_*",
    "GCONV_PATH",
    "GLIBC_TUNABLES",
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "BASH_FUNC_*",
    "PATH",
    "HOME",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "JAVA_OPTS",
    "CLASSPATH",
    "NODE_OPTIONS",
    "NODE_PATH",
    "NPM_CONFIG_*",
    "PYTHON*",
    "PERL5*",
    "PERLLIB",
    "RUBYOPT",
    "RUBYLIB",
    "LUA_*",
    "PHPRC",
    "PHP_INI_SCAN_DIR",
    "DOTNET_STARTUP_HOOKS",
    "DOTNET_ADDITIONAL_DEPS",
    "CORECLR_*",
    "OPENSSL_CONF",
    "OPENSSL_ENGINES",
    "OPENSSL_MODULES",
    "CATALINA_*",
    "JVM_OPTS",
    "MAVEN_OPTS",
    "MAVEN_ARGS",
    "GRADLE_OPTS",
    "KOTLIN_OPTS",
    "SCALA_OPTS",
    "SBT_OPTS",
    "ES_JAVA_OPTS",
    "JAVA_HOME",
    "GIT_*",
    "SSH_ASKPASS",
    "SSH_AUTH_SOCK",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "FTP_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "NODE_TLS_REJECT_UNAUTHORIZED",
    "NODE_EXTRA_CA_CERTS",
    "LOCALDOMAIN",
    "RES_OPTIONS",
    "HOSTALIASES",
    "RESOLV_*",
];

/// How env names are compared where a device could shadow or sneak in a name (R41): upper
/// case, with '-' and '.' as '_', as apps and libraries that read their settings loosely
/// (case-insensitively, or with dots and dashes folded) do.
pub fn env_key(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            '-' | '.' => '_',
            c => c.to_ascii_uppercase(),
        })
        .collect()
}

/// Why a token may not set `name` by default: its family and what of the name matched it
/// (`word OPTS`, `pattern PIP*`), or the second line's entry. `None`: an app setting.
pub fn denied(name: &str) -> Option<String> {
    let key = env_key(name);
    for family in FAMILIES {
        if let Some(word) = key.split('_').find(|w| family.words.contains(w)) {
            return Some(format!("{} (the word {word})", family.what));
        }
        if let Some(pattern) = family.patterns.iter().find(|p| glob_match(p, &key)) {
            return Some(format!("{} (the pattern {pattern})", family.what));
        }
    }
    STARTUP_ENV
        .iter()
        .find(|entry| glob_match(entry, &key))
        .map(|entry| format!("variables that change how a process starts ({entry})"))
}

#[cfg(test)]
mod tests;
