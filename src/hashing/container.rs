//! v1.Container as the kubelet's Go structs see it: decode (with Go's merge/null/case-folding
//! semantics, gated by the release that introduced each field) and re-encode in Go field order
//! with `omitempty`.
//!
//! Decisions:
//! - Strings are kept as borrowed input slices whenever Go's decoding would not change them.
//! - Decoded lists (and the rare strings that unescaping changed) live in the decoding thread's
//!   arena ([`super::arena`]), so a container holds nothing it must free: no allocator call and
//!   no drop walk per container (BENCHMARKS.md).
//! - Slices model Go's reuse of the backing array: a duplicate key decodes *into* the elements an
//!   earlier occurrence left behind (structs merge), `[]` and `null` start afresh.
//! - A field a release does not know is skipped (still validated) and therefore never encoded.

use bumpalo::Bump;

use super::accept::NameImage;
use super::arena;
use super::encode::{Encoder, Record, frag};
use super::json::{DResult, DecodeError, Parser, PathSeg, quantity_error, unquote_into, validate};
use super::schema::{Field, I32, I64, Kind, Schema};
use crate::quantity::{self, go_trim_space};

pub(crate) type Str<'a> = &'a [u8];

/// Decoding context: which kubelet minor release's schema applies.
struct Ctx<'a> {
    minor: u32,
    purpose: Purpose,
    /// Where the container's lists and unescaped strings go.
    arena: &'a Bump,
}

/// What a decoded container is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// Encoding it again (eras A and B): quantities get apimachinery's canonical text.
    Encode,
    /// Go's verdict and its plain fields only (era C's fallback, validation, kruise's env
    /// hash): quantities are only checked.
    Check,
}

/// A Go slice with its reused backing array (see module docs).
#[derive(Debug, Default)]
pub(crate) struct GoSlice<'a, T> {
    /// The backing array: every element initialised, `len` of them in the slice.
    items: &'a mut [T],
    len: usize,
}

impl<'a, T: Default> GoSlice<'a, T> {
    pub fn as_slice(&self) -> &[T] {
        &self.items[..self.len]
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Element `i` of the backing array, which grows when `i` is past its end. Capacity is
    /// not observable in Go's output: growth happens at `len == cap` and moves every element,
    /// so any growth factor behaves as Go's append.
    fn slot(&mut self, i: usize, arena: &'a Bump) -> &mut T {
        if i >= self.items.len() {
            let old = std::mem::take(&mut self.items);
            self.items = arena.alloc_slice_fill_with((2 * old.len()).max(4), |j| {
                old.get_mut(j).map(std::mem::take).unwrap_or_default()
            });
        }
        &mut self.items[i]
    }
}

// Nothing in a decoded container needs freeing: the arena never runs destructors, so a
// `Vec`, `String` or `Box` added to any of these structs would leak once per container.
const _: () = assert!(!std::mem::needs_drop::<Container<'static>>());

/// Go's IntOrString: both members persist; `Type` picks one.
#[derive(Debug, Default)]
pub(crate) struct IntOrStr<'a> {
    is_str: bool,
    int_val: i32,
    str_val: Str<'a>,
}

/// A Quantity as far as JSON output goes: the cached text, else the canonical text, else "0".
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Qty<'a> {
    cached: Option<&'a [u8]>,
    canonical: Option<&'a [u8]>,
}

impl Qty<'_> {
    fn text(&self) -> &[u8] {
        match (self.cached, self.canonical) {
            (Some(c), _) if !c.is_empty() => c,
            (_, Some(s)) => s,
            _ => b"0",
        }
    }
}

/// map[ResourceName]Quantity as (name, quantity) sorted by name, bytewise like Go's encoder
/// sorts map keys (short lists: one allocation instead of a tree).
pub(crate) type ResourceList<'a> = GoSlice<'a, (Str<'a>, Qty<'a>)>;

#[derive(Debug, Default)]
pub struct Container<'a> {
    pub name: Str<'a>,
    pub image: Str<'a>,
    command: GoSlice<'a, Str<'a>>,
    args: GoSlice<'a, Str<'a>>,
    working_dir: Str<'a>,
    ports: GoSlice<'a, ContainerPort<'a>>,
    env_from: GoSlice<'a, EnvFromSource<'a>>,
    pub env: GoSlice<'a, EnvVar<'a>>,
    resources: ResourceRequirements<'a>,
    resize_policy: GoSlice<'a, ResizePolicy<'a>>,
    restart_policy: Option<Str<'a>>,
    restart_policy_rules: GoSlice<'a, RestartRule<'a>>,
    volume_mounts: GoSlice<'a, VolumeMount<'a>>,
    volume_devices: GoSlice<'a, VolumeDevice<'a>>,
    liveness_probe: Option<Probe<'a>>,
    readiness_probe: Option<Probe<'a>>,
    startup_probe: Option<Probe<'a>>,
    lifecycle: Option<Lifecycle<'a>>,
    termination_message_path: Str<'a>,
    termination_message_policy: Str<'a>,
    image_pull_policy: Str<'a>,
    security_context: Option<SecurityContext<'a>>,
    stdin: bool,
    stdin_once: bool,
    tty: bool,
}

#[derive(Debug, Default)]
struct ContainerPort<'a> {
    name: Str<'a>,
    host_port: i32,
    container_port: i32,
    protocol: Str<'a>,
    host_ip: Str<'a>,
}

#[derive(Debug, Default)]
struct EnvFromSource<'a> {
    prefix: Str<'a>,
    config_map_ref: Option<OptionalRef<'a>>,
    secret_ref: Option<OptionalRef<'a>>,
}

/// ConfigMapEnvSource / SecretEnvSource.
#[derive(Debug, Default)]
struct OptionalRef<'a> {
    name: Str<'a>,
    optional: Option<bool>,
}

#[derive(Debug, Default)]
pub(crate) struct EnvVar<'a> {
    pub name: Str<'a>,
    pub value: Str<'a>,
    /// In the arena, as Go's pointer: list elements stay small.
    pub value_from: Option<&'a mut EnvVarSource<'a>>,
}

#[derive(Debug, Default)]
pub(crate) struct EnvVarSource<'a> {
    pub field_ref: Option<ObjectFieldSelector<'a>>,
    resource_field_ref: Option<ResourceFieldSelector<'a>>,
    config_map_key_ref: Option<KeySelector<'a>>,
    secret_key_ref: Option<KeySelector<'a>>,
    file_key_ref: Option<FileKeySelector<'a>>,
}

#[derive(Debug, Default)]
pub(crate) struct ObjectFieldSelector<'a> {
    api_version: Str<'a>,
    pub field_path: Str<'a>,
}

#[derive(Debug, Default)]
struct ResourceFieldSelector<'a> {
    container_name: Str<'a>,
    resource: Str<'a>,
    divisor: Qty<'a>,
}

/// ConfigMapKeySelector / SecretKeySelector.
#[derive(Debug, Default)]
struct KeySelector<'a> {
    name: Str<'a>,
    key: Str<'a>,
    optional: Option<bool>,
}

#[derive(Debug, Default)]
struct FileKeySelector<'a> {
    volume_name: Str<'a>,
    path: Str<'a>,
    key: Str<'a>,
    optional: Option<bool>,
}

#[derive(Debug, Default)]
struct ResourceRequirements<'a> {
    limits: Option<ResourceList<'a>>,
    requests: Option<ResourceList<'a>>,
    claims: GoSlice<'a, ResourceClaim<'a>>,
}

#[derive(Debug, Default)]
struct ResourceClaim<'a> {
    name: Str<'a>,
    request: Str<'a>,
}

#[derive(Debug, Default)]
struct ResizePolicy<'a> {
    resource_name: Str<'a>,
    restart_policy: Str<'a>,
}

#[derive(Debug, Default)]
struct RestartRule<'a> {
    action: Str<'a>,
    exit_codes: Option<ExitCodes<'a>>,
}

#[derive(Debug, Default)]
struct ExitCodes<'a> {
    operator: Str<'a>,
    values: GoSlice<'a, i32>,
}

#[derive(Debug, Default)]
struct VolumeMount<'a> {
    name: Str<'a>,
    read_only: bool,
    recursive_read_only: Option<Str<'a>>,
    mount_path: Str<'a>,
    sub_path: Str<'a>,
    mount_propagation: Option<Str<'a>>,
    sub_path_expr: Str<'a>,
}

#[derive(Debug, Default)]
struct VolumeDevice<'a> {
    name: Str<'a>,
    device_path: Str<'a>,
}

#[derive(Debug, Default)]
struct Probe<'a> {
    exec: Option<ExecAction<'a>>,
    http_get: Option<HttpGet<'a>>,
    tcp_socket: Option<TcpSocket<'a>>,
    grpc: Option<Grpc<'a>>,
    initial_delay_seconds: i32,
    timeout_seconds: i32,
    period_seconds: i32,
    success_threshold: i32,
    failure_threshold: i32,
    termination_grace_period_seconds: Option<i64>,
}

#[derive(Debug, Default)]
struct ExecAction<'a> {
    command: GoSlice<'a, Str<'a>>,
}

#[derive(Debug, Default)]
struct HttpGet<'a> {
    path: Str<'a>,
    port: IntOrStr<'a>,
    host: Str<'a>,
    scheme: Str<'a>,
    http_headers: GoSlice<'a, HttpHeader<'a>>,
}

#[derive(Debug, Default)]
struct HttpHeader<'a> {
    name: Str<'a>,
    value: Str<'a>,
}

#[derive(Debug, Default)]
struct TcpSocket<'a> {
    port: IntOrStr<'a>,
    host: Str<'a>,
}

#[derive(Debug, Default)]
struct Grpc<'a> {
    port: i32,
    service: Option<Str<'a>>,
}

#[derive(Debug, Default)]
struct Lifecycle<'a> {
    post_start: Option<LifecycleHandler<'a>>,
    pre_stop: Option<LifecycleHandler<'a>>,
    stop_signal: Option<Str<'a>>,
}

#[derive(Debug, Default)]
struct LifecycleHandler<'a> {
    exec: Option<ExecAction<'a>>,
    http_get: Option<HttpGet<'a>>,
    tcp_socket: Option<TcpSocket<'a>>,
    sleep: Option<SleepAction>,
}

#[derive(Debug, Default)]
struct SleepAction {
    seconds: i64,
}

#[derive(Debug, Default)]
struct SecurityContext<'a> {
    capabilities: Option<Capabilities<'a>>,
    privileged: Option<bool>,
    se_linux_options: Option<SeLinuxOptions<'a>>,
    windows_options: Option<WindowsOptions<'a>>,
    run_as_user: Option<i64>,
    run_as_group: Option<i64>,
    run_as_non_root: Option<bool>,
    read_only_root_filesystem: Option<bool>,
    allow_privilege_escalation: Option<bool>,
    proc_mount: Option<Str<'a>>,
    seccomp_profile: Option<Profile<'a>>,
    app_armor_profile: Option<Profile<'a>>,
}

#[derive(Debug, Default)]
struct Capabilities<'a> {
    add: GoSlice<'a, Str<'a>>,
    drop: GoSlice<'a, Str<'a>>,
}

#[derive(Debug, Default)]
struct SeLinuxOptions<'a> {
    user: Str<'a>,
    role: Str<'a>,
    type_: Str<'a>,
    level: Str<'a>,
}

#[derive(Debug, Default)]
struct WindowsOptions<'a> {
    gmsa_credential_spec_name: Option<Str<'a>>,
    gmsa_credential_spec: Option<Str<'a>>,
    run_as_user_name: Option<Str<'a>>,
    host_process: Option<bool>,
}

/// SeccompProfile / AppArmorProfile.
#[derive(Debug, Default)]
struct Profile<'a> {
    type_: Str<'a>,
    localhost_profile: Option<Str<'a>>,
}

// ---------------------------------------------------------------------------------------------
// Decoding primitives (Go's literalStore / indirect semantics per Go kind).

/// A decoded string: the input's own bytes, or (escapes undone) a copy in the arena. Inline:
/// the call cost more than the scan of a usual short string (BENCHMARKS.md).
#[inline(always)]
fn string_in<'a>(p: &mut Parser<'a>, ctx: &Ctx<'a>) -> DResult<Str<'a>> {
    let (raw, changed) = p.string_changed()?;
    Ok(decoded_in(raw, changed, ctx.arena))
}

/// A string's raw text as Go decodes it: itself unless `changed`, else unescaped straight into
/// the arena (no heap copy in between: a huge string is held once).
#[inline(always)]
fn decoded_in<'a>(raw: &'a [u8], changed: bool, arena: &'a Bump) -> Str<'a> {
    if changed {
        unescaped_in(raw, arena)
    } else {
        raw
    }
}

/// [`decoded_in`] of a string Go's decoding changes (out of line: the less common case).
#[cold]
#[inline(never)]
fn unescaped_in<'a>(raw: &'a [u8], arena: &'a Bump) -> Str<'a> {
    let mut out = bumpalo::collections::Vec::with_capacity_in(raw.len(), arena);
    unquote_into(raw, &mut out);
    out.into_bump_slice()
}

fn dec_str<'a>(p: &mut Parser<'a>, ctx: &Ctx<'a>, out: &mut Str<'a>) -> DResult<()> {
    match p.peek_value()? {
        b'"' => *out = string_in(p, ctx)?,
        b'n' => {
            p.literal()?;
        }
        _ => return p.type_error("string"),
    }
    Ok(())
}

fn dec_opt_str<'a>(p: &mut Parser<'a>, ctx: &Ctx<'a>, out: &mut Option<Str<'a>>) -> DResult<()> {
    match p.peek_value()? {
        b'"' => *out = Some(string_in(p, ctx)?),
        b'n' => {
            p.literal()?;
            *out = None;
        }
        _ => return p.type_error("string"),
    }
    Ok(())
}

fn dec_bool(p: &mut Parser<'_>, out: &mut bool) -> DResult<()> {
    match p.peek_value()? {
        b't' | b'f' => *out = p.literal()? == b"true",
        b'n' => {
            p.literal()?;
        }
        _ => return p.type_error("bool"),
    }
    Ok(())
}

fn dec_opt_bool(p: &mut Parser<'_>, out: &mut Option<bool>) -> DResult<()> {
    match p.peek_value()? {
        b't' | b'f' => *out = Some(p.literal()? == b"true"),
        b'n' => {
            p.literal()?;
            *out = None;
        }
        _ => return p.type_error("bool"),
    }
    Ok(())
}

fn dec_i32(p: &mut Parser<'_>, out: &mut i32) -> DResult<()> {
    if let Some(v) = p.int(i64::from(i32::MIN), i64::from(i32::MAX), "int32")? {
        *out = v as i32;
    }
    Ok(())
}

fn dec_i64(p: &mut Parser<'_>, out: &mut i64) -> DResult<()> {
    if let Some(v) = p.int(i64::MIN, i64::MAX, "int64")? {
        *out = v;
    }
    Ok(())
}

fn dec_opt_i64(p: &mut Parser<'_>, out: &mut Option<i64>) -> DResult<()> {
    match p.peek_value()? {
        b'n' => {
            p.literal()?;
            *out = None;
            Ok(())
        }
        _ => {
            let mut v = out.unwrap_or(0);
            dec_i64(p, &mut v)?;
            *out = Some(v);
            Ok(())
        }
    }
}

/// Out of line, one copy per call site: inlined, the element loops made the container's
/// field dispatch too large to inline into its key loop (BENCHMARKS.md).
#[inline(never)]
fn dec_slice<'a, T: Default>(
    p: &mut Parser<'a>,
    ctx: &Ctx<'a>,
    s: &mut GoSlice<'a, T>,
    mut elem: impl FnMut(&mut Parser<'a>, &mut T) -> DResult<()>,
) -> DResult<()> {
    match p.peek_value()? {
        b'n' => {
            p.literal()?;
            s.items = &mut [];
            s.len = 0;
        }
        b'[' => {
            p.begin_array()?;
            let mut first = true;
            let mut i = 0;
            while p.next_elem(&mut first)? {
                elem(p, s.slot(i, ctx.arena)).map_err(|e| e.at(PathSeg::Index(i)))?;
                i += 1;
            }
            if i == 0 {
                s.items = &mut [];
            }
            s.len = i;
        }
        _ => return p.type_error("array"),
    }
    Ok(())
}

fn dec_str_slice<'a>(
    p: &mut Parser<'a>,
    ctx: &Ctx<'a>,
    s: &mut GoSlice<'a, Str<'a>>,
) -> DResult<()> {
    dec_slice(p, ctx, s, |p, v| dec_str(p, ctx, v))
}

/// A pointer to a struct: null sets nil, an object decodes into (a possibly new) value.
fn dec_ptr<'a, T: Default>(
    p: &mut Parser<'a>,
    out: &mut Option<T>,
    ctx: &Ctx<'a>,
    obj: fn(&mut Parser<'a>, &mut T, &Ctx<'a>) -> DResult<()>,
) -> DResult<()> {
    dec_nullable(p, out, ctx, |o| o.get_or_insert_with(T::default), obj)
}

/// [`dec_ptr`] for a pointer whose struct is kept in the arena.
fn dec_arena_ptr<'a, T: Default>(
    p: &mut Parser<'a>,
    out: &mut Option<&'a mut T>,
    ctx: &Ctx<'a>,
    obj: fn(&mut Parser<'a>, &mut T, &Ctx<'a>) -> DResult<()>,
) -> DResult<()> {
    let arena = ctx.arena;
    dec_nullable(
        p,
        out,
        ctx,
        |o| &mut **o.get_or_insert_with(|| arena.alloc(T::default())),
        obj,
    )
}

/// Go's decoding into a pointer `out`: null sets nil; an object decodes into the value `get`
/// gives (the existing one, or a new one when nil).
fn dec_nullable<'a, P, T>(
    p: &mut Parser<'a>,
    out: &mut Option<P>,
    ctx: &Ctx<'a>,
    get: impl FnOnce(&mut Option<P>) -> &mut T,
    obj: fn(&mut Parser<'a>, &mut T, &Ctx<'a>) -> DResult<()>,
) -> DResult<()> {
    match p.peek_value()? {
        b'n' => {
            p.literal()?;
            *out = None;
            Ok(())
        }
        b'{' => obj(p, get(out), ctx),
        _ => p.type_error("object"),
    }
}

/// A struct value (not a pointer): null leaves it unchanged.
fn dec_struct<'a, T>(
    p: &mut Parser<'a>,
    out: &mut T,
    ctx: &Ctx<'a>,
    obj: fn(&mut Parser<'a>, &mut T, &Ctx<'a>) -> DResult<()>,
) -> DResult<()> {
    match p.peek_value()? {
        b'n' => {
            p.literal()?;
            Ok(())
        }
        b'{' => obj(p, out, ctx),
        _ => p.type_error("object"),
    }
}

/// Go's object decoding into a struct: each key selects a field (see [`Schema::lookup`]) and is
/// decoded into it; other keys are skipped (still validated).
fn dec_fields<'a, T>(
    p: &mut Parser<'a>,
    t: &mut T,
    ctx: &Ctx<'a>,
    schema: &Schema,
    dispatch: fn(&mut Parser<'a>, &mut T, usize, &Ctx<'a>) -> DResult<()>,
) -> DResult<()> {
    p.begin_object()?;
    let mut first = true;
    while let Some(field) = p.next_key_with(&mut first, |key| schema.lookup(key, ctx.minor))? {
        match field {
            Some(field) => dispatch(p, t, field, ctx)?,
            None => p.skip_value()?,
        }
    }
    Ok(())
}

/// Declares a struct's fields: the schema (JSON names, release introduced, accepted JSON; see
/// [`super::schema`]) and the decoder dispatch, which decodes the field at a schema index.
macro_rules! fields {
    (
        fn $dispatch:ident<$lt:lifetime>($p:ident, $t:ident: $T:ty, $ctx:ident);
        const $schema:ident;
        { $( $json:literal $( since $since:literal )? : $kind:expr => $body:expr ),* $(,)? }
    ) => {
        const $schema: Schema = Schema::new(&[
            $( Field::new($json, 0 $( + $since )?, $kind) ),*
        ]);
        #[allow(unused_variables)]
        fn $dispatch<$lt>($p: &mut Parser<$lt>, $t: &mut $T, field: usize, $ctx: &Ctx<$lt>) -> DResult<()> {
            $(
                if field == const { $schema.index_of($json) } {
                    return ($body).map_err(|e: Box<DecodeError>| e.at(PathSeg::Field($json)));
                }
            )*
            Ok(())
        }
    };
    // The same, plus `$obj`: decodes a whole JSON object of `$T` through the dispatch.
    (
        fn $dispatch:ident<$lt:lifetime>($p:ident, $t:ident: $T:ty, $ctx:ident);
        const $schema:ident;
        fn $obj:ident;
        { $( $json:literal $( since $since:literal )? : $kind:expr => $body:expr ),* $(,)? }
    ) => {
        fields! {
            fn $dispatch<$lt>($p, $t: $T, $ctx);
            const $schema;
            { $( $json $( since $since )? : $kind => $body ),* }
        }
        fn $obj<$lt>($p: &mut Parser<$lt>, $t: &mut $T, $ctx: &Ctx<$lt>) -> DResult<()> {
            dec_fields($p, $t, $ctx, &$schema, $dispatch)
        }
    };
}

fields! {
    fn container_field<'a>(p, t: Container<'a>, ctx);
    const CONTAINER;
    fn container_obj;
    {
        "name": Kind::Str => dec_str(p, ctx, &mut t.name),
        "image": Kind::Str => dec_str(p, ctx, &mut t.image),
        "command": Kind::List(&Kind::Str) => dec_str_slice(p, ctx, &mut t.command),
        "args": Kind::List(&Kind::Str) => dec_str_slice(p, ctx, &mut t.args),
        "workingDir": Kind::Str => dec_str(p, ctx, &mut t.working_dir),
        "ports": Kind::List(&Kind::Object(&PORT)) => dec_slice(p, ctx, &mut t.ports, |p, v| dec_struct(p, v, ctx, port_obj)),
        "envFrom": Kind::List(&Kind::Object(&ENV_FROM)) => dec_slice(p, ctx, &mut t.env_from, |p, v| dec_struct(p, v, ctx, env_from_obj)),
        "env": Kind::List(&Kind::Object(&ENV_VAR)) => dec_slice(p, ctx, &mut t.env, |p, v| dec_struct(p, v, ctx, env_var_obj)),
        "resources": Kind::Object(&RESOURCES) => dec_struct(p, &mut t.resources, ctx, resources_obj),
        "resizePolicy" since 27: Kind::List(&Kind::Object(&RESIZE)) => dec_slice(p, ctx, &mut t.resize_policy, |p, v| dec_struct(p, v, ctx, resize_obj)),
        "restartPolicy" since 28: Kind::Str => dec_opt_str(p, ctx, &mut t.restart_policy),
        "restartPolicyRules" since 34: Kind::List(&Kind::Object(&RESTART_RULE)) => dec_slice(p, ctx, &mut t.restart_policy_rules, |p, v| dec_struct(p, v, ctx, restart_rule_obj)),
        "volumeMounts": Kind::List(&Kind::Object(&VOLUME_MOUNT)) => dec_slice(p, ctx, &mut t.volume_mounts, |p, v| dec_struct(p, v, ctx, volume_mount_obj)),
        "volumeDevices": Kind::List(&Kind::Object(&VOLUME_DEVICE)) => dec_slice(p, ctx, &mut t.volume_devices, |p, v| dec_struct(p, v, ctx, volume_device_obj)),
        "livenessProbe": Kind::Object(&PROBE) => dec_ptr(p, &mut t.liveness_probe, ctx, probe_obj),
        "readinessProbe": Kind::Object(&PROBE) => dec_ptr(p, &mut t.readiness_probe, ctx, probe_obj),
        "startupProbe" since 16: Kind::Object(&PROBE) => dec_ptr(p, &mut t.startup_probe, ctx, probe_obj),
        "lifecycle": Kind::Object(&LIFECYCLE) => dec_ptr(p, &mut t.lifecycle, ctx, lifecycle_obj),
        "terminationMessagePath": Kind::Str => dec_str(p, ctx, &mut t.termination_message_path),
        "terminationMessagePolicy": Kind::Str => dec_str(p, ctx, &mut t.termination_message_policy),
        "imagePullPolicy": Kind::Str => dec_str(p, ctx, &mut t.image_pull_policy),
        "securityContext": Kind::Object(&SECURITY_CONTEXT) => dec_ptr(p, &mut t.security_context, ctx, security_context_obj),
        "stdin": Kind::Bool => dec_bool(p, &mut t.stdin),
        "stdinOnce": Kind::Bool => dec_bool(p, &mut t.stdin_once),
        "tty": Kind::Bool => dec_bool(p, &mut t.tty),
    }
}

fields! {
    fn port_field<'a>(p, t: ContainerPort<'a>, ctx);
    const PORT;
    fn port_obj;
    {
        "name": Kind::Str => dec_str(p, ctx, &mut t.name),
        "hostPort": I32 => dec_i32(p, &mut t.host_port),
        "containerPort": I32 => dec_i32(p, &mut t.container_port),
        "protocol": Kind::Str => dec_str(p, ctx, &mut t.protocol),
        "hostIP": Kind::Str => dec_str(p, ctx, &mut t.host_ip),
    }
}

fields! {
    fn env_from_field<'a>(p, t: EnvFromSource<'a>, ctx);
    const ENV_FROM;
    fn env_from_obj;
    {
        "prefix": Kind::Str => dec_str(p, ctx, &mut t.prefix),
        "configMapRef": Kind::Object(&OPTIONAL_REF) => dec_ptr(p, &mut t.config_map_ref, ctx, optional_ref_obj),
        "secretRef": Kind::Object(&OPTIONAL_REF) => dec_ptr(p, &mut t.secret_ref, ctx, optional_ref_obj),
    }
}

fields! {
    fn optional_ref_field<'a>(p, t: OptionalRef<'a>, ctx);
    const OPTIONAL_REF;
    fn optional_ref_obj;
    {
        "name": Kind::Str => dec_str(p, ctx, &mut t.name),
        "optional": Kind::Bool => dec_opt_bool(p, &mut t.optional),
    }
}

fields! {
    fn env_var_field<'a>(p, t: EnvVar<'a>, ctx);
    const ENV_VAR;
    fn env_var_obj;
    {
        "name": Kind::Str => dec_str(p, ctx, &mut t.name),
        "value": Kind::Str => dec_str(p, ctx, &mut t.value),
        "valueFrom": Kind::Object(&ENV_SOURCE) => dec_arena_ptr(p, &mut t.value_from, ctx, env_source_obj),
    }
}

fields! {
    fn env_source_field<'a>(p, t: EnvVarSource<'a>, ctx);
    const ENV_SOURCE;
    fn env_source_obj;
    {
        "fieldRef": Kind::Object(&FIELD_SELECTOR) => dec_ptr(p, &mut t.field_ref, ctx, field_selector_obj),
        "resourceFieldRef": Kind::Object(&RESOURCE_SELECTOR) => dec_ptr(p, &mut t.resource_field_ref, ctx, resource_selector_obj),
        "configMapKeyRef": Kind::Object(&KEY_SELECTOR) => dec_ptr(p, &mut t.config_map_key_ref, ctx, key_selector_obj),
        "secretKeyRef": Kind::Object(&KEY_SELECTOR) => dec_ptr(p, &mut t.secret_key_ref, ctx, key_selector_obj),
        "fileKeyRef" since 34: Kind::Object(&FILE_KEY) => dec_ptr(p, &mut t.file_key_ref, ctx, file_key_obj),
    }
}

fields! {
    fn field_selector_field<'a>(p, t: ObjectFieldSelector<'a>, ctx);
    const FIELD_SELECTOR;
    fn field_selector_obj;
    {
        "apiVersion": Kind::Str => dec_str(p, ctx, &mut t.api_version),
        "fieldPath": Kind::Str => dec_str(p, ctx, &mut t.field_path),
    }
}

fields! {
    fn resource_selector_field<'a>(p, t: ResourceFieldSelector<'a>, ctx);
    const RESOURCE_SELECTOR;
    fn resource_selector_obj;
    {
        "containerName": Kind::Str => dec_str(p, ctx, &mut t.container_name),
        "resource": Kind::Str => dec_str(p, ctx, &mut t.resource),
        "divisor": Kind::Quantity => dec_qty(p, &mut t.divisor, ctx),
    }
}

fields! {
    fn key_selector_field<'a>(p, t: KeySelector<'a>, ctx);
    const KEY_SELECTOR;
    fn key_selector_obj;
    {
        "name": Kind::Str => dec_str(p, ctx, &mut t.name),
        "key": Kind::Str => dec_str(p, ctx, &mut t.key),
        "optional": Kind::Bool => dec_opt_bool(p, &mut t.optional),
    }
}

fields! {
    fn file_key_field<'a>(p, t: FileKeySelector<'a>, ctx);
    const FILE_KEY;
    fn file_key_obj;
    {
        "volumeName": Kind::Str => dec_str(p, ctx, &mut t.volume_name),
        "path": Kind::Str => dec_str(p, ctx, &mut t.path),
        "key": Kind::Str => dec_str(p, ctx, &mut t.key),
        "optional": Kind::Bool => dec_opt_bool(p, &mut t.optional),
    }
}

fields! {
    fn resources_field<'a>(p, t: ResourceRequirements<'a>, ctx);
    const RESOURCES;
    fn resources_obj;
    {
        "limits": Kind::ResourceList => dec_resource_list(p, &mut t.limits, ctx),
        "requests": Kind::ResourceList => dec_resource_list(p, &mut t.requests, ctx),
        "claims" since 26: Kind::List(&Kind::Object(&CLAIM)) => dec_slice(p, ctx, &mut t.claims, |p, v| dec_struct(p, v, ctx, claim_obj)),
    }
}

fields! {
    fn claim_field<'a>(p, t: ResourceClaim<'a>, ctx);
    const CLAIM;
    fn claim_obj;
    {
        "name": Kind::Str => dec_str(p, ctx, &mut t.name),
        "request" since 31: Kind::Str => dec_str(p, ctx, &mut t.request),
    }
}

fields! {
    fn resize_field<'a>(p, t: ResizePolicy<'a>, ctx);
    const RESIZE;
    fn resize_obj;
    {
        "resourceName": Kind::Str => dec_str(p, ctx, &mut t.resource_name),
        "restartPolicy": Kind::Str => dec_str(p, ctx, &mut t.restart_policy),
    }
}

fields! {
    fn restart_rule_field<'a>(p, t: RestartRule<'a>, ctx);
    const RESTART_RULE;
    fn restart_rule_obj;
    {
        "action": Kind::Str => dec_str(p, ctx, &mut t.action),
        "exitCodes": Kind::Object(&EXIT_CODES) => dec_ptr(p, &mut t.exit_codes, ctx, exit_codes_obj),
    }
}

fields! {
    fn exit_codes_field<'a>(p, t: ExitCodes<'a>, ctx);
    const EXIT_CODES;
    fn exit_codes_obj;
    {
        "operator": Kind::Str => dec_str(p, ctx, &mut t.operator),
        "values": Kind::List(&I32) => dec_slice(p, ctx, &mut t.values, dec_i32),
    }
}

fields! {
    fn volume_mount_field<'a>(p, t: VolumeMount<'a>, ctx);
    const VOLUME_MOUNT;
    fn volume_mount_obj;
    {
        "name": Kind::Str => dec_str(p, ctx, &mut t.name),
        "readOnly": Kind::Bool => dec_bool(p, &mut t.read_only),
        "recursiveReadOnly" since 30: Kind::Str => dec_opt_str(p, ctx, &mut t.recursive_read_only),
        "mountPath": Kind::Str => dec_str(p, ctx, &mut t.mount_path),
        "subPath": Kind::Str => dec_str(p, ctx, &mut t.sub_path),
        "mountPropagation": Kind::Str => dec_opt_str(p, ctx, &mut t.mount_propagation),
        "subPathExpr": Kind::Str => dec_str(p, ctx, &mut t.sub_path_expr),
    }
}

fields! {
    fn volume_device_field<'a>(p, t: VolumeDevice<'a>, ctx);
    const VOLUME_DEVICE;
    fn volume_device_obj;
    {
        "name": Kind::Str => dec_str(p, ctx, &mut t.name),
        "devicePath": Kind::Str => dec_str(p, ctx, &mut t.device_path),
    }
}

fields! {
    fn probe_field<'a>(p, t: Probe<'a>, ctx);
    const PROBE;
    fn probe_obj;
    {
        "exec": Kind::Object(&EXEC) => dec_ptr(p, &mut t.exec, ctx, exec_obj),
        "httpGet": Kind::Object(&HTTP_GET) => dec_ptr(p, &mut t.http_get, ctx, http_get_obj),
        "tcpSocket": Kind::Object(&TCP_SOCKET) => dec_ptr(p, &mut t.tcp_socket, ctx, tcp_socket_obj),
        "grpc" since 23: Kind::Object(&GRPC) => dec_ptr(p, &mut t.grpc, ctx, grpc_obj),
        "initialDelaySeconds": I32 => dec_i32(p, &mut t.initial_delay_seconds),
        "timeoutSeconds": I32 => dec_i32(p, &mut t.timeout_seconds),
        "periodSeconds": I32 => dec_i32(p, &mut t.period_seconds),
        "successThreshold": I32 => dec_i32(p, &mut t.success_threshold),
        "failureThreshold": I32 => dec_i32(p, &mut t.failure_threshold),
        "terminationGracePeriodSeconds" since 21: I64 => dec_opt_i64(p, &mut t.termination_grace_period_seconds),
    }
}

fields! {
    fn exec_field<'a>(p, t: ExecAction<'a>, ctx);
    const EXEC;
    fn exec_obj;
    {
        "command": Kind::List(&Kind::Str) => dec_str_slice(p, ctx, &mut t.command),
    }
}

fields! {
    fn http_get_field<'a>(p, t: HttpGet<'a>, ctx);
    const HTTP_GET;
    fn http_get_obj;
    {
        "path": Kind::Str => dec_str(p, ctx, &mut t.path),
        "port": Kind::IntOrStr => dec_int_or_str(p, ctx, &mut t.port),
        "host": Kind::Str => dec_str(p, ctx, &mut t.host),
        "scheme": Kind::Str => dec_str(p, ctx, &mut t.scheme),
        "httpHeaders": Kind::List(&Kind::Object(&HEADER)) => dec_slice(p, ctx, &mut t.http_headers, |p, v| dec_struct(p, v, ctx, header_obj)),
    }
}

fields! {
    fn header_field<'a>(p, t: HttpHeader<'a>, ctx);
    const HEADER;
    fn header_obj;
    {
        "name": Kind::Str => dec_str(p, ctx, &mut t.name),
        "value": Kind::Str => dec_str(p, ctx, &mut t.value),
    }
}

fields! {
    fn tcp_socket_field<'a>(p, t: TcpSocket<'a>, ctx);
    const TCP_SOCKET;
    fn tcp_socket_obj;
    {
        "port": Kind::IntOrStr => dec_int_or_str(p, ctx, &mut t.port),
        "host": Kind::Str => dec_str(p, ctx, &mut t.host),
    }
}

fields! {
    fn grpc_field<'a>(p, t: Grpc<'a>, ctx);
    const GRPC;
    fn grpc_obj;
    {
        "port": I32 => dec_i32(p, &mut t.port),
        "service": Kind::Str => dec_opt_str(p, ctx, &mut t.service),
    }
}

fields! {
    fn lifecycle_field<'a>(p, t: Lifecycle<'a>, ctx);
    const LIFECYCLE;
    fn lifecycle_obj;
    {
        "postStart": Kind::Object(&HANDLER) => dec_ptr(p, &mut t.post_start, ctx, handler_obj),
        "preStop": Kind::Object(&HANDLER) => dec_ptr(p, &mut t.pre_stop, ctx, handler_obj),
        "stopSignal" since 33: Kind::Str => dec_opt_str(p, ctx, &mut t.stop_signal),
    }
}

fields! {
    fn handler_field<'a>(p, t: LifecycleHandler<'a>, ctx);
    const HANDLER;
    fn handler_obj;
    {
        "exec": Kind::Object(&EXEC) => dec_ptr(p, &mut t.exec, ctx, exec_obj),
        "httpGet": Kind::Object(&HTTP_GET) => dec_ptr(p, &mut t.http_get, ctx, http_get_obj),
        "tcpSocket": Kind::Object(&TCP_SOCKET) => dec_ptr(p, &mut t.tcp_socket, ctx, tcp_socket_obj),
        "sleep" since 29: Kind::Object(&SLEEP) => dec_ptr(p, &mut t.sleep, ctx, sleep_obj),
    }
}

fields! {
    fn sleep_field<'a>(p, t: SleepAction, ctx);
    const SLEEP;
    fn sleep_obj;
    {
        "seconds": I64 => dec_i64(p, &mut t.seconds),
    }
}

fields! {
    fn security_context_field<'a>(p, t: SecurityContext<'a>, ctx);
    const SECURITY_CONTEXT;
    fn security_context_obj;
    {
        "capabilities": Kind::Object(&CAPABILITIES) => dec_ptr(p, &mut t.capabilities, ctx, capabilities_obj),
        "privileged": Kind::Bool => dec_opt_bool(p, &mut t.privileged),
        "seLinuxOptions": Kind::Object(&SELINUX) => dec_ptr(p, &mut t.se_linux_options, ctx, selinux_obj),
        "windowsOptions": Kind::Object(&WINDOWS) => dec_ptr(p, &mut t.windows_options, ctx, windows_obj),
        "runAsUser": I64 => dec_opt_i64(p, &mut t.run_as_user),
        "runAsGroup": I64 => dec_opt_i64(p, &mut t.run_as_group),
        "runAsNonRoot": Kind::Bool => dec_opt_bool(p, &mut t.run_as_non_root),
        "readOnlyRootFilesystem": Kind::Bool => dec_opt_bool(p, &mut t.read_only_root_filesystem),
        "allowPrivilegeEscalation": Kind::Bool => dec_opt_bool(p, &mut t.allow_privilege_escalation),
        "procMount": Kind::Str => dec_opt_str(p, ctx, &mut t.proc_mount),
        "seccompProfile" since 19: Kind::Object(&PROFILE) => dec_ptr(p, &mut t.seccomp_profile, ctx, profile_obj),
        "appArmorProfile" since 30: Kind::Object(&PROFILE) => dec_ptr(p, &mut t.app_armor_profile, ctx, profile_obj),
    }
}

fields! {
    fn capabilities_field<'a>(p, t: Capabilities<'a>, ctx);
    const CAPABILITIES;
    fn capabilities_obj;
    {
        "add": Kind::List(&Kind::Str) => dec_str_slice(p, ctx, &mut t.add),
        "drop": Kind::List(&Kind::Str) => dec_str_slice(p, ctx, &mut t.drop),
    }
}

fields! {
    fn selinux_field<'a>(p, t: SeLinuxOptions<'a>, ctx);
    const SELINUX;
    fn selinux_obj;
    {
        "user": Kind::Str => dec_str(p, ctx, &mut t.user),
        "role": Kind::Str => dec_str(p, ctx, &mut t.role),
        "type": Kind::Str => dec_str(p, ctx, &mut t.type_),
        "level": Kind::Str => dec_str(p, ctx, &mut t.level),
    }
}

fields! {
    fn windows_field<'a>(p, t: WindowsOptions<'a>, ctx);
    const WINDOWS;
    fn windows_obj;
    {
        "gmsaCredentialSpecName": Kind::Str => dec_opt_str(p, ctx, &mut t.gmsa_credential_spec_name),
        "gmsaCredentialSpec": Kind::Str => dec_opt_str(p, ctx, &mut t.gmsa_credential_spec),
        "runAsUserName": Kind::Str => dec_opt_str(p, ctx, &mut t.run_as_user_name),
        "hostProcess" since 22: Kind::Bool => dec_opt_bool(p, &mut t.host_process),
    }
}

fields! {
    fn profile_field<'a>(p, t: Profile<'a>, ctx);
    const PROFILE;
    fn profile_obj;
    {
        "type": Kind::Str => dec_str(p, ctx, &mut t.type_),
        "localhostProfile": Kind::Str => dec_opt_str(p, ctx, &mut t.localhost_profile),
    }
}

/// IntOrString.UnmarshalJSON: a string sets the string member, anything else must be an int32.
fn dec_int_or_str<'a>(p: &mut Parser<'a>, ctx: &Ctx<'a>, v: &mut IntOrStr<'a>) -> DResult<()> {
    match p.peek_value()? {
        b'"' => {
            v.is_str = true;
            v.str_val = string_in(p, ctx)?;
            Ok(())
        }
        b'n' => {
            // Go sets Type=Int and leaves IntVal alone.
            p.literal()?;
            v.is_str = false;
            Ok(())
        }
        _ => {
            v.is_str = false;
            dec_i32(p, &mut v.int_val)
        }
    }
}

/// Quantity.UnmarshalJSON: parses the *raw* JSON text (quotes stripped, escapes not processed).
fn dec_qty<'a>(p: &mut Parser<'a>, q: &mut Qty<'a>, ctx: &Ctx<'a>) -> DResult<()> {
    let at = p.offset();
    let text: &'a [u8] = match p.peek_value()? {
        b'n' => {
            p.literal()?;
            // Value reset to zero, cached text kept (Go leaves Quantity.s alone).
            q.canonical = None;
            return Ok(());
        }
        b'"' => go_trim_space(p.string_raw()?),
        b'-' | b'0'..=b'9' => p.number()?,
        b't' | b'f' => p.literal()?,
        _ => {
            p.skip_value()?;
            return quantity_error(
                b"<object or array>",
                crate::quantity::QuantityError::FormatWrong,
                at,
            );
        }
    };
    let parsed = if ctx.purpose == Purpose::Encode {
        quantity::json_text(text)
    } else {
        quantity::validate(text).map(|()| None)
    };
    match parsed {
        Ok(None) if ctx.purpose == Purpose::Encode => {
            q.cached = Some(text);
            q.canonical = None;
            Ok(())
        }
        Ok(canonical) => {
            q.cached = None;
            q.canonical = canonical.map(|s| ctx.arena.alloc_slice_copy(s.as_bytes()) as &[u8]);
            Ok(())
        }
        Err(e) => quantity_error(text, e, at),
    }
}

/// map[ResourceName]Quantity: keys exact (case-sensitive), later duplicates replace.
fn dec_resource_list<'a>(
    p: &mut Parser<'a>,
    m: &mut Option<ResourceList<'a>>,
    ctx: &Ctx<'a>,
) -> DResult<()> {
    match p.peek_value()? {
        b'n' => {
            p.literal()?;
            *m = None;
            Ok(())
        }
        b'{' => {
            // A second object for the same map adds to it (Go decodes into the existing map).
            let map = m.get_or_insert_with(GoSlice::default);
            p.begin_object()?;
            let mut first = true;
            while let Some((raw, changed)) = p.next_key_changed(&mut first)? {
                let key = decoded_in(raw, changed, ctx.arena);
                let mut q = Qty::default();
                if let Err(e) = dec_qty(p, &mut q, ctx) {
                    return Err(e.at(PathSeg::Key(String::from_utf8_lossy(key).into_owned())));
                }
                *map.slot(map.len, ctx.arena) = (key, q);
                map.len += 1;
            }
            // Sorted by name, the last value of a name winning (Go's map assignment): newest
            // first, a stable sort, then the first of each name kept.
            let entries = &mut map.items[..map.len];
            entries.reverse();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let mut kept = 0;
            for i in 0..entries.len() {
                if kept == 0 || entries[i].0 != entries[kept - 1].0 {
                    entries.swap(kept, i);
                    kept += 1;
                }
            }
            map.len = kept;
            Ok(())
        }
        _ => p.type_error("object"),
    }
}

/// Decodes a v1.Container document as release `minor`'s kubelet would and hands the container
/// to `f`. The container's lists live in this thread's arena until `f` returns.
pub(crate) fn with_decoded<R>(
    src: &[u8],
    minor: u32,
    purpose: Purpose,
    f: impl FnOnce(&Container<'_>) -> R,
) -> DResult<R> {
    arena::with(|arena| {
        let ctx = Ctx {
            minor,
            purpose,
            arena,
        };
        let mut c = Container::default();
        decode_into(src, &ctx, &mut c)?;
        Ok(f(&c))
    })
}

/// Decodes into a default container the caller holds (the struct is large: not moved).
fn decode_into<'a>(src: &'a [u8], ctx: &Ctx<'a>, c: &mut Container<'a>) -> DResult<()> {
    let mut p = Parser::new(src);
    let r = (|| {
        match p.peek_value()? {
            b'{' => container_obj(&mut p, c, ctx)?,
            b'n' => {
                p.literal()?;
            }
            _ => return p.type_error("object (v1.Container)"),
        }
        p.finish()
    })();
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.is_syntax() => Err(e),
        Err(e) => {
            // Go checks the whole document's syntax before decoding: a syntax error wins.
            validate(src)?;
            Err(e)
        }
    }
}

/// Era C: the container's name and image as [`with_decoded`] would leave them, when Go accepts the
/// container, read without building it ([`super::accept`]); `None` leaves the answer (and Go's
/// error message) to [`with_decoded`].
pub(crate) fn accept_name_image(src: &[u8], minor: u32) -> Option<NameImage<'_>> {
    const NAME: usize = CONTAINER.index_of("name");
    const IMAGE: usize = CONTAINER.index_of("image");
    super::accept::name_image(src, &CONTAINER, NAME, IMAGE, minor)
}

// ---------------------------------------------------------------------------------------------
// Encoding (json.Marshal of the Go structs).

/// `,"key":"` and a string value, without the comma for the first field of an object.
macro_rules! key_str {
    ($e:expr, $first:expr, $k:literal, $v:expr) => {
        $e.string_after(
            if std::mem::replace(&mut $first, false) {
                frag!(concat!("\"", $k, "\":\"").as_bytes())
            } else {
                frag!(concat!(",\"", $k, "\":\"").as_bytes())
            },
            $v,
        )
    };
}

/// `,"key":`, without the comma for the first field of an object.
macro_rules! key {
    ($e:expr, $first:expr, $k:literal) => {
        $e.frag(if std::mem::replace(&mut $first, false) {
            frag!(concat!("\"", $k, "\":").as_bytes())
        } else {
            frag!(concat!(",\"", $k, "\":").as_bytes())
        })
    };
}

/// A list of strings; the quotes and commas between them are one constant step each (`["`,
/// `","` with the pending closing quote, `"]`).
fn enc_str_slice(e: &mut Encoder<impl Record>, s: &[Str<'_>]) {
    let Some((first, rest)) = s.split_first() else {
        return e.frag(frag!(b"[]"));
    };
    e.string_after(frag!(b"[\""), first);
    for v in rest {
        e.string_after(frag!(b",\""), v);
    }
    e.frag(frag!(b"]"));
}

fn enc_slice<T, R: Record>(e: &mut Encoder<R>, s: &[T], f: impl Fn(&mut Encoder<R>, &T)) {
    e.frag(frag!(b"["));
    for (i, v) in s.iter().enumerate() {
        if i > 0 {
            e.frag(frag!(b","));
        }
        f(e, v);
    }
    e.frag(frag!(b"]"));
}

/// Era A/B: the whole container; `without_resources` zeroes Resources (era B's second hash).
pub(crate) fn encode_container(
    e: &mut Encoder<impl Record>,
    c: &Container<'_>,
    without_resources: bool,
) {
    let mut f = true;
    e.frag(frag!(b"{"));
    key_str!(e, f, "name", &c.name);
    if !c.image.is_empty() {
        key_str!(e, f, "image", &c.image);
    }
    if !c.command.is_empty() {
        key!(e, f, "command");
        enc_str_slice(e, c.command.as_slice());
    }
    if !c.args.is_empty() {
        key!(e, f, "args");
        enc_str_slice(e, c.args.as_slice());
    }
    if !c.working_dir.is_empty() {
        key_str!(e, f, "workingDir", &c.working_dir);
    }
    if !c.ports.is_empty() {
        key!(e, f, "ports");
        enc_slice(e, c.ports.as_slice(), enc_port);
    }
    if !c.env_from.is_empty() {
        key!(e, f, "envFrom");
        enc_slice(e, c.env_from.as_slice(), enc_env_from);
    }
    if !c.env.is_empty() {
        key!(e, f, "env");
        enc_slice(e, c.env.as_slice(), enc_env_var);
    }
    key!(e, f, "resources");
    if without_resources {
        e.frag(frag!(b"{}"));
    } else {
        enc_resources(e, &c.resources);
    }
    if !c.resize_policy.is_empty() {
        key!(e, f, "resizePolicy");
        enc_slice(e, c.resize_policy.as_slice(), |e, r| {
            e.string_after(frag!(b"{\"resourceName\":\""), r.resource_name);
            e.string_after(frag!(b",\"restartPolicy\":\""), r.restart_policy);
            e.frag(frag!(b"}"));
        });
    }
    if let Some(rp) = &c.restart_policy {
        key_str!(e, f, "restartPolicy", rp);
    }
    if !c.restart_policy_rules.is_empty() {
        key!(e, f, "restartPolicyRules");
        enc_slice(e, c.restart_policy_rules.as_slice(), enc_restart_rule);
    }
    if !c.volume_mounts.is_empty() {
        key!(e, f, "volumeMounts");
        enc_slice(e, c.volume_mounts.as_slice(), enc_volume_mount);
    }
    if !c.volume_devices.is_empty() {
        key!(e, f, "volumeDevices");
        enc_slice(e, c.volume_devices.as_slice(), |e, d| {
            e.string_after(frag!(b"{\"name\":\""), d.name);
            e.string_after(frag!(b",\"devicePath\":\""), d.device_path);
            e.frag(frag!(b"}"));
        });
    }
    if let Some(p) = &c.liveness_probe {
        key!(e, f, "livenessProbe");
        enc_probe(e, p);
    }
    if let Some(p) = &c.readiness_probe {
        key!(e, f, "readinessProbe");
        enc_probe(e, p);
    }
    if let Some(p) = &c.startup_probe {
        key!(e, f, "startupProbe");
        enc_probe(e, p);
    }
    if let Some(l) = &c.lifecycle {
        key!(e, f, "lifecycle");
        enc_lifecycle(e, l);
    }
    if !c.termination_message_path.is_empty() {
        key_str!(e, f, "terminationMessagePath", &c.termination_message_path);
    }
    if !c.termination_message_policy.is_empty() {
        key_str!(
            e,
            f,
            "terminationMessagePolicy",
            &c.termination_message_policy
        );
    }
    if !c.image_pull_policy.is_empty() {
        key_str!(e, f, "imagePullPolicy", &c.image_pull_policy);
    }
    if let Some(s) = &c.security_context {
        key!(e, f, "securityContext");
        enc_security_context(e, s);
    }
    if c.stdin {
        key!(e, f, "stdin");
        e.frag(frag!(b"true"));
    }
    if c.stdin_once {
        key!(e, f, "stdinOnce");
        e.frag(frag!(b"true"));
    }
    if c.tty {
        key!(e, f, "tty");
        e.frag(frag!(b"true"));
    }
    e.frag(frag!(b"}"));
}

/// Era C: `json.Marshal(map[string]string{"name":..,"image":..})` (keys sorted).
pub(crate) fn encode_name_image(e: &mut Encoder<impl Record>, name: &[u8], image: &[u8]) {
    e.string_after(frag!(b"{\"image\":\""), image);
    e.string_after(frag!(b",\"name\":\""), name);
    e.frag(frag!(b"}"));
}

fn enc_port(e: &mut Encoder<impl Record>, p: &ContainerPort<'_>) {
    let mut f = true;
    e.frag(frag!(b"{"));
    if !p.name.is_empty() {
        key_str!(e, f, "name", &p.name);
    }
    if p.host_port != 0 {
        key!(e, f, "hostPort");
        e.int(i64::from(p.host_port));
    }
    key!(e, f, "containerPort");
    e.int(i64::from(p.container_port));
    if !p.protocol.is_empty() {
        key_str!(e, f, "protocol", &p.protocol);
    }
    if !p.host_ip.is_empty() {
        key_str!(e, f, "hostIP", &p.host_ip);
    }
    e.frag(frag!(b"}"));
}

fn enc_optional_ref(e: &mut Encoder<impl Record>, r: &OptionalRef<'_>) {
    let mut f = true;
    e.frag(frag!(b"{"));
    if !r.name.is_empty() {
        key_str!(e, f, "name", &r.name);
    }
    if let Some(o) = r.optional {
        key!(e, f, "optional");
        e.bool(o);
    }
    e.frag(frag!(b"}"));
}

fn enc_env_from(e: &mut Encoder<impl Record>, s: &EnvFromSource<'_>) {
    let mut f = true;
    e.frag(frag!(b"{"));
    if !s.prefix.is_empty() {
        key_str!(e, f, "prefix", &s.prefix);
    }
    if let Some(r) = &s.config_map_ref {
        key!(e, f, "configMapRef");
        enc_optional_ref(e, r);
    }
    if let Some(r) = &s.secret_ref {
        key!(e, f, "secretRef");
        enc_optional_ref(e, r);
    }
    e.frag(frag!(b"}"));
}

fn enc_key_selector(e: &mut Encoder<impl Record>, k: &KeySelector<'_>) {
    let mut f = true;
    e.frag(frag!(b"{"));
    if !k.name.is_empty() {
        key_str!(e, f, "name", &k.name);
    }
    key_str!(e, f, "key", &k.key);
    if let Some(o) = k.optional {
        key!(e, f, "optional");
        e.bool(o);
    }
    e.frag(frag!(b"}"));
}

pub(crate) fn enc_env_var(e: &mut Encoder<impl Record>, v: &EnvVar<'_>) {
    e.string_after(frag!(b"{\"name\":\""), v.name);
    if !v.value.is_empty() {
        e.string_after(frag!(b",\"value\":\""), v.value);
    }
    if let Some(src) = &v.value_from {
        e.frag(frag!(b",\"valueFrom\":"));
        let mut f = true;
        e.frag(frag!(b"{"));
        if let Some(r) = &src.field_ref {
            key!(e, f, "fieldRef");
            let mut g = true;
            e.frag(frag!(b"{"));
            if !r.api_version.is_empty() {
                key_str!(e, g, "apiVersion", &r.api_version);
            }
            key_str!(e, g, "fieldPath", &r.field_path);
            e.frag(frag!(b"}"));
        }
        if let Some(r) = &src.resource_field_ref {
            key!(e, f, "resourceFieldRef");
            let mut g = true;
            e.frag(frag!(b"{"));
            if !r.container_name.is_empty() {
                key_str!(e, g, "containerName", &r.container_name);
            }
            key_str!(e, g, "resource", &r.resource);
            key_str!(e, g, "divisor", r.divisor.text());
            e.frag(frag!(b"}"));
        }
        if let Some(r) = &src.config_map_key_ref {
            key!(e, f, "configMapKeyRef");
            enc_key_selector(e, r);
        }
        if let Some(r) = &src.secret_key_ref {
            key!(e, f, "secretKeyRef");
            enc_key_selector(e, r);
        }
        if let Some(r) = &src.file_key_ref {
            key!(e, f, "fileKeyRef");
            e.string_after(frag!(b"{\"volumeName\":\""), r.volume_name);
            e.string_after(frag!(b",\"path\":\""), r.path);
            e.string_after(frag!(b",\"key\":\""), r.key);
            if let Some(o) = r.optional {
                e.frag(frag!(b",\"optional\":"));
                e.bool(o);
            }
            e.frag(frag!(b"}"));
        }
        e.frag(frag!(b"}"));
    }
    e.frag(frag!(b"}"));
}

fn enc_resource_list(e: &mut Encoder<impl Record>, m: &ResourceList<'_>) {
    e.frag(frag!(b"{"));
    for (i, (k, q)) in m.as_slice().iter().enumerate() {
        if i > 0 {
            e.frag(frag!(b","));
        }
        e.string(k);
        e.string_after(frag!(b":\""), q.text());
    }
    e.frag(frag!(b"}"));
}

fn enc_resources(e: &mut Encoder<impl Record>, r: &ResourceRequirements<'_>) {
    let mut f = true;
    e.frag(frag!(b"{"));
    if let Some(m) = r.limits.as_ref().filter(|m| !m.is_empty()) {
        key!(e, f, "limits");
        enc_resource_list(e, m);
    }
    if let Some(m) = r.requests.as_ref().filter(|m| !m.is_empty()) {
        key!(e, f, "requests");
        enc_resource_list(e, m);
    }
    if !r.claims.is_empty() {
        key!(e, f, "claims");
        enc_slice(e, r.claims.as_slice(), |e, c| {
            e.string_after(frag!(b"{\"name\":\""), c.name);
            if !c.request.is_empty() {
                e.string_after(frag!(b",\"request\":\""), c.request);
            }
            e.frag(frag!(b"}"));
        });
    }
    e.frag(frag!(b"}"));
}

fn enc_restart_rule(e: &mut Encoder<impl Record>, r: &RestartRule<'_>) {
    let mut f = true;
    e.frag(frag!(b"{"));
    if !r.action.is_empty() {
        key_str!(e, f, "action", &r.action);
    }
    if let Some(x) = &r.exit_codes {
        key!(e, f, "exitCodes");
        let mut g = true;
        e.frag(frag!(b"{"));
        if !x.operator.is_empty() {
            key_str!(e, g, "operator", &x.operator);
        }
        if !x.values.is_empty() {
            key!(e, g, "values");
            enc_slice(e, x.values.as_slice(), |e, v| e.int(i64::from(*v)));
        }
        e.frag(frag!(b"}"));
    }
    e.frag(frag!(b"}"));
}

fn enc_volume_mount(e: &mut Encoder<impl Record>, m: &VolumeMount<'_>) {
    e.string_after(frag!(b"{\"name\":\""), m.name);
    if m.read_only {
        e.frag(frag!(b",\"readOnly\":true"));
    }
    if let Some(r) = &m.recursive_read_only {
        e.string_after(frag!(b",\"recursiveReadOnly\":\""), r);
    }
    e.string_after(frag!(b",\"mountPath\":\""), m.mount_path);
    if !m.sub_path.is_empty() {
        e.string_after(frag!(b",\"subPath\":\""), m.sub_path);
    }
    if let Some(p) = &m.mount_propagation {
        e.string_after(frag!(b",\"mountPropagation\":\""), p);
    }
    if !m.sub_path_expr.is_empty() {
        e.string_after(frag!(b",\"subPathExpr\":\""), m.sub_path_expr);
    }
    e.frag(frag!(b"}"));
}

fn enc_int_or_str(e: &mut Encoder<impl Record>, v: &IntOrStr<'_>) {
    if v.is_str {
        e.string(v.str_val);
    } else {
        e.int(i64::from(v.int_val));
    }
}

fn enc_exec(e: &mut Encoder<impl Record>, x: &ExecAction<'_>) {
    e.frag(frag!(b"{"));
    if !x.command.is_empty() {
        e.frag(frag!(b"\"command\":"));
        enc_str_slice(e, x.command.as_slice());
    }
    e.frag(frag!(b"}"));
}

fn enc_http_get(e: &mut Encoder<impl Record>, h: &HttpGet<'_>) {
    let mut f = true;
    e.frag(frag!(b"{"));
    if !h.path.is_empty() {
        key_str!(e, f, "path", &h.path);
    }
    key!(e, f, "port");
    enc_int_or_str(e, &h.port);
    if !h.host.is_empty() {
        key_str!(e, f, "host", &h.host);
    }
    if !h.scheme.is_empty() {
        key_str!(e, f, "scheme", &h.scheme);
    }
    if !h.http_headers.is_empty() {
        key!(e, f, "httpHeaders");
        enc_slice(e, h.http_headers.as_slice(), |e, hd| {
            e.string_after(frag!(b"{\"name\":\""), hd.name);
            e.string_after(frag!(b",\"value\":\""), hd.value);
            e.frag(frag!(b"}"));
        });
    }
    e.frag(frag!(b"}"));
}

fn enc_tcp_socket(e: &mut Encoder<impl Record>, t: &TcpSocket<'_>) {
    e.frag(frag!(b"{\"port\":"));
    enc_int_or_str(e, &t.port);
    if !t.host.is_empty() {
        e.string_after(frag!(b",\"host\":\""), t.host);
    }
    e.frag(frag!(b"}"));
}

fn enc_probe(e: &mut Encoder<impl Record>, p: &Probe<'_>) {
    let mut f = true;
    e.frag(frag!(b"{"));
    if let Some(x) = &p.exec {
        key!(e, f, "exec");
        enc_exec(e, x);
    }
    if let Some(h) = &p.http_get {
        key!(e, f, "httpGet");
        enc_http_get(e, h);
    }
    if let Some(t) = &p.tcp_socket {
        key!(e, f, "tcpSocket");
        enc_tcp_socket(e, t);
    }
    if let Some(g) = &p.grpc {
        key!(e, f, "grpc");
        e.frag(frag!(b"{\"port\":"));
        e.int(i64::from(g.port));
        e.frag(frag!(b",\"service\":"));
        match &g.service {
            Some(s) => e.string(s),
            None => e.frag(frag!(b"null")),
        }
        e.frag(frag!(b"}"));
    }
    if p.initial_delay_seconds != 0 {
        key!(e, f, "initialDelaySeconds");
        e.int(i64::from(p.initial_delay_seconds));
    }
    if p.timeout_seconds != 0 {
        key!(e, f, "timeoutSeconds");
        e.int(i64::from(p.timeout_seconds));
    }
    if p.period_seconds != 0 {
        key!(e, f, "periodSeconds");
        e.int(i64::from(p.period_seconds));
    }
    if p.success_threshold != 0 {
        key!(e, f, "successThreshold");
        e.int(i64::from(p.success_threshold));
    }
    if p.failure_threshold != 0 {
        key!(e, f, "failureThreshold");
        e.int(i64::from(p.failure_threshold));
    }
    if let Some(t) = p.termination_grace_period_seconds {
        key!(e, f, "terminationGracePeriodSeconds");
        e.int(t);
    }
    e.frag(frag!(b"}"));
}

fn enc_handler(e: &mut Encoder<impl Record>, h: &LifecycleHandler<'_>) {
    let mut f = true;
    e.frag(frag!(b"{"));
    if let Some(x) = &h.exec {
        key!(e, f, "exec");
        enc_exec(e, x);
    }
    if let Some(x) = &h.http_get {
        key!(e, f, "httpGet");
        enc_http_get(e, x);
    }
    if let Some(x) = &h.tcp_socket {
        key!(e, f, "tcpSocket");
        enc_tcp_socket(e, x);
    }
    if let Some(s) = &h.sleep {
        key!(e, f, "sleep");
        e.frag(frag!(b"{\"seconds\":"));
        e.int(s.seconds);
        e.frag(frag!(b"}"));
    }
    e.frag(frag!(b"}"));
}

fn enc_lifecycle(e: &mut Encoder<impl Record>, l: &Lifecycle<'_>) {
    let mut f = true;
    e.frag(frag!(b"{"));
    if let Some(h) = &l.post_start {
        key!(e, f, "postStart");
        enc_handler(e, h);
    }
    if let Some(h) = &l.pre_stop {
        key!(e, f, "preStop");
        enc_handler(e, h);
    }
    if let Some(s) = &l.stop_signal {
        key_str!(e, f, "stopSignal", s);
    }
    e.frag(frag!(b"}"));
}

fn enc_profile(e: &mut Encoder<impl Record>, p: &Profile<'_>) {
    e.string_after(frag!(b"{\"type\":\""), p.type_);
    if let Some(l) = &p.localhost_profile {
        e.string_after(frag!(b",\"localhostProfile\":\""), l);
    }
    e.frag(frag!(b"}"));
}

fn enc_security_context(e: &mut Encoder<impl Record>, s: &SecurityContext<'_>) {
    let mut f = true;
    e.frag(frag!(b"{"));
    if let Some(c) = &s.capabilities {
        key!(e, f, "capabilities");
        let mut g = true;
        e.frag(frag!(b"{"));
        if !c.add.is_empty() {
            key!(e, g, "add");
            enc_str_slice(e, c.add.as_slice());
        }
        if !c.drop.is_empty() {
            key!(e, g, "drop");
            enc_str_slice(e, c.drop.as_slice());
        }
        e.frag(frag!(b"}"));
    }
    if let Some(v) = s.privileged {
        key!(e, f, "privileged");
        e.bool(v);
    }
    if let Some(o) = &s.se_linux_options {
        key!(e, f, "seLinuxOptions");
        let mut g = true;
        e.frag(frag!(b"{"));
        if !o.user.is_empty() {
            key_str!(e, g, "user", &o.user);
        }
        if !o.role.is_empty() {
            key_str!(e, g, "role", &o.role);
        }
        if !o.type_.is_empty() {
            key_str!(e, g, "type", &o.type_);
        }
        if !o.level.is_empty() {
            key_str!(e, g, "level", &o.level);
        }
        e.frag(frag!(b"}"));
    }
    if let Some(w) = &s.windows_options {
        key!(e, f, "windowsOptions");
        let mut g = true;
        e.frag(frag!(b"{"));
        if let Some(v) = &w.gmsa_credential_spec_name {
            key_str!(e, g, "gmsaCredentialSpecName", v);
        }
        if let Some(v) = &w.gmsa_credential_spec {
            key_str!(e, g, "gmsaCredentialSpec", v);
        }
        if let Some(v) = &w.run_as_user_name {
            key_str!(e, g, "runAsUserName", v);
        }
        if let Some(h) = w.host_process {
            key!(e, g, "hostProcess");
            e.bool(h);
        }
        e.frag(frag!(b"}"));
    }
    if let Some(v) = s.run_as_user {
        key!(e, f, "runAsUser");
        e.int(v);
    }
    if let Some(v) = s.run_as_group {
        key!(e, f, "runAsGroup");
        e.int(v);
    }
    if let Some(v) = s.run_as_non_root {
        key!(e, f, "runAsNonRoot");
        e.bool(v);
    }
    if let Some(v) = s.read_only_root_filesystem {
        key!(e, f, "readOnlyRootFilesystem");
        e.bool(v);
    }
    if let Some(v) = s.allow_privilege_escalation {
        key!(e, f, "allowPrivilegeEscalation");
        e.bool(v);
    }
    if let Some(v) = &s.proc_mount {
        key_str!(e, f, "procMount", v);
    }
    if let Some(p) = &s.seccomp_profile {
        key!(e, f, "seccompProfile");
        enc_profile(e, p);
    }
    if let Some(p) = &s.app_armor_profile {
        key!(e, f, "appArmorProfile");
        enc_profile(e, p);
    }
    e.frag(frag!(b"}"));
}
