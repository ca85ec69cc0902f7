//! CEL for admission policies: the environment (the `cel` crate's standard library and
//! strings extension, plus the Kubernetes list functions it lacks), compiled programs cached
//! by source, and the activation policies are evaluated in: `object`, `oldObject`,
//! `request`, `params`, `namespaceObject` and lazily evaluated `variables`.
//!
//! Kubernetes' CEL environment (`staging/src/k8s.io/apiserver/pkg/cel/environment/base.go`)
//! has the standard library with cel-go's strings extension, which the `cel` crate provides
//! as [`cel::extensions::strings`] (`substring`, `lastIndexOf`, `indexOf`, `split`, `join`,
//! `replace`, `lowerAscii`, `upperAscii`, `trim`, `charAt`, `format`, `quote`, `reverse`),
//! and Kubernetes' own libraries. Of those, the list library's `indexOf`, `lastIndexOf`,
//! `isSorted`, `sum`, `min` and `max` are registered here. Not provided: `authorizer`,
//! `quantity`, `url`, `ip`/`cidr`, `semver`, regex `find`/`findAll`, sets, optional field
//! selection on maps beyond what the crate parses, timestamps and durations (the crate's
//! `chrono` feature is off). An expression using them fails as it runs, and the policy's
//! `failurePolicy` decides.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use cel::common::types::{CelInt, DYN_TYPE, LIST_TYPE};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::{Context, Env, ExecutionError, Program, Value as CelValue};
use serde_json::Value;

/// A compiled expression, or why it did not compile.
pub(crate) type Compiled = Arc<Result<Program, String>>;

/// Distinct expressions kept compiled; the cache is emptied when it grows past this.
const CACHE_LIMIT: usize = 1024;

/// The environment and a cache of compiled expressions, shared by every write.
pub struct Compiler {
    env: Arc<Env>,
    cache: Mutex<HashMap<String, Compiled>>,
}

impl Default for Compiler {
    fn default() -> Self {
        Compiler {
            env: Arc::new(kubernetes_env()),
            cache: Mutex::new(HashMap::new()),
        }
    }
}

impl Compiler {
    /// `source` compiled (parsed, macros expanded), from the cache when it was seen before.
    pub(crate) fn compile(&self, source: &str) -> Compiled {
        let mut cache = lock(&self.cache);
        if let Some(compiled) = cache.get(source) {
            return compiled.clone();
        }
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        let compiled = Arc::new(self.env.compile(source).map_err(|e| e.to_string()));
        cache.insert(source.to_owned(), compiled.clone());
        compiled
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The `cel` crate's standard environment with what Kubernetes adds that it has
/// (the strings extension) and what it lacks (the Kubernetes list functions).
pub fn kubernetes_env() -> Env {
    let mut env = Env::stdlib();
    // Both only fail on a name registered twice, which a fresh environment rules out.
    env.add_extension(cel::extensions::strings)
        .expect("the strings extension registers once");
    env.add_extension(kubernetes_lists)
        .expect("the Kubernetes list functions register once");
    env
}

/// Kubernetes' list library, as the Kubernetes CEL documentation describes it (its source,
/// `staging/src/k8s.io/apiserver/pkg/cel/library/lists.go`, was not compared here):
/// `l.indexOf(e)`, `l.lastIndexOf(e)` (-1 when absent), `l.isSorted()`, `l.sum()`, `l.min()`,
/// `l.max()` (the last two fail on an empty list).
fn kubernetes_lists(env: &mut Env) -> Result<(), cel::DeclarationError> {
    env.add_member_overload(
        "indexOf",
        "list_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        list_index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list_last_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        list_last_index_of,
    )?;
    env.add_member_overload("isSorted", "list_is_sorted", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list_min", LIST_TYPE, vec![], min)?;
    env.add_member_overload("max", "list_max", LIST_TYPE, vec![], max)?;
    Ok(())
}

/// The elements of a list argument, as values.
fn elements(function: &str, arg: &CowVal<'_, '_>) -> Result<Vec<CelValue>, ExecutionError> {
    match CelValue::try_from(arg.as_ref())? {
        CelValue::List(items) => Ok(items.as_ref().clone()),
        other => Err(ExecutionError::function_error(
            function,
            format!("not a list: {other:?}"),
        )),
    }
}

fn owned<'b, 'v>(v: CelValue) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let boxed: Box<dyn Val> = v.try_into()?;
    Ok(CowVal::Owned(boxed))
}

fn position(
    function: &str,
    args: &[CowVal<'_, '_>],
    last: bool,
) -> Result<CowVal<'static, 'static>, ExecutionError> {
    let [list, wanted] = args else {
        return Err(ExecutionError::invalid_argument_count(2, args.len()));
    };
    let items = elements(function, list)?;
    let wanted = CelValue::try_from(wanted.as_ref())?;
    let mut found = items.iter().enumerate().filter(|(_, v)| **v == wanted);
    let at = if last {
        found.next_back()
    } else {
        found.next()
    };
    let at = at.map_or(-1, |(i, _)| i64::try_from(i).unwrap_or(i64::MAX));
    Ok(CowVal::owned(CelInt::from(at)))
}

fn list_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position("indexOf", &args, false)
}

fn list_last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position("lastIndexOf", &args, true)
}

/// The elements of the only argument, all comparable with each other.
fn comparable(function: &str, args: &[CowVal<'_, '_>]) -> Result<Vec<CelValue>, ExecutionError> {
    let [list] = args else {
        return Err(ExecutionError::invalid_argument_count(1, args.len()));
    };
    let items = elements(function, list)?;
    for pair in items.windows(2) {
        if pair[0].partial_cmp(&pair[1]).is_none() {
            return Err(ExecutionError::ValuesNotComparable(
                pair[0].clone(),
                pair[1].clone(),
            ));
        }
    }
    Ok(items)
}

fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = comparable("isSorted", &args)?;
    owned(CelValue::Bool(items.windows(2).all(|p| p[0] <= p[1])))
}

fn extreme<'b, 'v>(
    function: &str,
    args: Vec<CowVal<'b, 'v>>,
    want: std::cmp::Ordering,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = comparable(function, &args)?;
    let mut best: Option<CelValue> = None;
    for item in items {
        best = match best {
            Some(b) if item.partial_cmp(&b) != Some(want) => Some(b),
            _ => Some(item),
        };
    }
    let best = best
        .ok_or_else(|| ExecutionError::function_error(function, "the list is empty".to_owned()))?;
    owned(best)
}

fn min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme("min", args, std::cmp::Ordering::Less)
}

fn max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme("max", args, std::cmp::Ordering::Greater)
}

fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list] = args.as_slice() else {
        return Err(ExecutionError::invalid_argument_count(1, args.len()));
    };
    let items = elements("sum", list)?;
    let overflow = || ExecutionError::function_error("sum", "integer overflow".to_owned());
    let total = match items.first() {
        // The sum of an empty list is the int 0.
        None => CelValue::Int(0),
        Some(CelValue::Int(_)) => {
            let mut t: i64 = 0;
            for item in &items {
                let CelValue::Int(i) = item else {
                    return Err(mixed("sum", item));
                };
                t = t.checked_add(*i).ok_or_else(overflow)?;
            }
            CelValue::Int(t)
        }
        Some(CelValue::UInt(_)) => {
            let mut t: u64 = 0;
            for item in &items {
                let CelValue::UInt(u) = item else {
                    return Err(mixed("sum", item));
                };
                t = t.checked_add(*u).ok_or_else(overflow)?;
            }
            CelValue::UInt(t)
        }
        Some(CelValue::Float(_)) => {
            let mut t = 0.0;
            for item in &items {
                let CelValue::Float(f) = item else {
                    return Err(mixed("sum", item));
                };
                t += f;
            }
            CelValue::Float(t)
        }
        Some(other) => return Err(mixed("sum", other)),
    };
    owned(total)
}

fn mixed(function: &str, item: &CelValue) -> ExecutionError {
    ExecutionError::function_error(function, format!("cannot add {item:?}"))
}

/// JSON as CEL sees an unstructured Kubernetes object: integers are `int` (`uint` only past
/// `i64`), other numbers `double`.
pub fn to_cel(v: &Value) -> CelValue {
    match v {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => CelValue::Int(i),
            (None, Some(u)) => CelValue::UInt(u),
            _ => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Array(items) => CelValue::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => {
            let entries: HashMap<String, CelValue> =
                map.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            CelValue::from(entries)
        }
    }
}

fn boxed(v: CelValue) -> Box<dyn Val> {
    // Only functions and opaque values have no `Val`: JSON has neither.
    v.try_into().unwrap_or_else(|_| {
        let null: Box<dyn Val> = CelValue::Null.try_into().expect("null is a value");
        null
    })
}

/// One named variable of a policy: its source and compiled form.
pub(crate) struct Variable {
    pub name: String,
    pub source: String,
    pub compiled: Compiled,
}

/// The inputs of one evaluation of a policy's expressions, and its variables, each evaluated
/// at most once, when an expression first names it (`variables.<name>`), as kube-apiserver's
/// composited compiler does. A variable sees only those declared before it.
pub(crate) struct Activation<'c> {
    env: Arc<Env>,
    object: Box<dyn Val>,
    old_object: Box<dyn Val>,
    request: Box<dyn Val>,
    namespace_object: Box<dyn Val>,
    params: Box<dyn Val>,
    variables: &'c [Variable],
    memo: Mutex<Vec<Option<Result<CelValue, String>>>>,
    /// Each variable's value as the interpreter takes it, made once: converting a large value
    /// (a list or map of an object's parts) on every `variables.x` would cost the size of the
    /// value per reference, where kube-apiserver's lookups into it cost nothing of the kind.
    as_val: Vec<OnceLock<Box<dyn Val>>>,
}

/// The JSON inputs of an [`Activation`].
pub(crate) struct Inputs<'a> {
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
    pub request: &'a Value,
    pub namespace_object: Option<&'a Value>,
    /// The binding's param, or none (`params` is null).
    pub params: Option<&'a Value>,
}

impl<'c> Activation<'c> {
    pub(crate) fn new(compiler: &Compiler, inputs: &Inputs<'_>, variables: &'c [Variable]) -> Self {
        let cel = |v: Option<&Value>| boxed(v.map_or(CelValue::Null, to_cel));
        Activation {
            env: compiler.env.clone(),
            object: cel(inputs.object),
            old_object: cel(inputs.old_object),
            request: cel(Some(inputs.request)),
            namespace_object: cel(inputs.namespace_object),
            params: cel(inputs.params),
            variables,
            memo: Mutex::new(vec![None; variables.len()]),
            as_val: variables.iter().map(|_| OnceLock::new()).collect(),
        }
    }

    /// Evaluates `compiled` (whose source is `source`) with every variable in view. The
    /// error is the message kube-apiserver gives: `compilation error: ...` or
    /// `expression '...' resulted in error: ...`.
    pub(crate) fn eval(&self, source: &str, compiled: &Compiled) -> Result<CelValue, String> {
        self.eval_seeing(source, compiled, self.variables.len())
    }

    fn eval_seeing(
        &self,
        source: &str,
        compiled: &Compiled,
        visible: usize,
    ) -> Result<CelValue, String> {
        let program = match compiled.as_ref() {
            Ok(program) => program,
            Err(e) => return Err(format!("compilation error: {e}")),
        };
        let scope = Scope {
            activation: self,
            visible,
            failed: Mutex::new(None),
        };
        let mut ctx = Context::with_env(self.env.clone());
        ctx.set_variable_resolver(&scope);
        let result = program.execute(&ctx);
        result.map_err(|e| {
            let cause = lock(&scope.failed).take().unwrap_or_else(|| e.to_string());
            format!("expression '{source}' resulted in error: {cause}")
        })
    }

    /// Variable `i`, evaluated on first use.
    fn variable(&self, i: usize) -> Result<CelValue, String> {
        if let Some(done) = &lock(&self.memo)[i] {
            return done.clone();
        }
        let var = &self.variables[i];
        let result = self.eval_seeing(&var.source, &var.compiled, i);
        lock(&self.memo)[i] = Some(result.clone());
        result
    }
}

/// The names one expression sees: the inputs, and the variables declared before `visible`.
struct Scope<'a, 'c> {
    activation: &'a Activation<'c>,
    visible: usize,
    /// Why a variable the expression named could not be evaluated.
    failed: Mutex<Option<String>>,
}

impl VariableResolver for Scope<'_, '_> {
    fn resolve<'b>(&'b self, name: &str) -> Option<CowVal<'b, 'b>> {
        let a = self.activation;
        let borrowed = |v: &'b dyn Val| Some(CowVal::Borrowed(v));
        match name {
            "object" => borrowed(a.object.as_ref()),
            "oldObject" => borrowed(a.old_object.as_ref()),
            "request" => borrowed(a.request.as_ref()),
            "namespaceObject" => borrowed(a.namespace_object.as_ref()),
            "params" => borrowed(a.params.as_ref()),
            // The whole map (e.g. for `has(variables.x)`): the variables that evaluate.
            "variables" => {
                let all: HashMap<String, CelValue> = (0..self.visible)
                    .filter_map(|i| Some((a.variables[i].name.clone(), a.variable(i).ok()?)))
                    .collect();
                Some(CowVal::Owned(boxed(CelValue::from(all))))
            }
            _ => {
                // `variables.x` is looked up whole before `variables`, field by field.
                let wanted = name.strip_prefix("variables.")?;
                let i = a.variables[..self.visible]
                    .iter()
                    .position(|v| v.name == wanted)?;
                if let Some(val) = a.as_val[i].get() {
                    return Some(CowVal::Borrowed(val.as_ref()));
                }
                match a.variable(i) {
                    Ok(v) => Some(CowVal::Borrowed(
                        a.as_val[i].get_or_init(|| boxed(v)).as_ref(),
                    )),
                    Err(e) => {
                        *lock(&self.failed) = Some(format!("variables.{wanted}: {e}"));
                        None
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval_with(
        source: &str,
        object: Value,
        variables: &[(&str, &str)],
    ) -> Result<CelValue, String> {
        let compiler = Compiler::default();
        let vars: Vec<Variable> = variables
            .iter()
            .map(|(name, src)| Variable {
                name: (*name).to_owned(),
                source: (*src).to_owned(),
                compiled: compiler.compile(src),
            })
            .collect();
        let request = json!({"userInfo": {"username": "system:node:n1", "groups": ["system:nodes", "system:authenticated"]},
                             "resource": {"group": "", "version": "v1", "resource": "pods"}});
        let object = (!object.is_null()).then_some(object);
        let inputs = Inputs {
            object: object.as_ref(),
            old_object: None,
            request: &request,
            namespace_object: None,
            params: None,
        };
        let activation = Activation::new(&compiler, &inputs, &vars);
        activation.eval(source, &compiler.compile(source))
    }

    fn eval(source: &str) -> Result<CelValue, String> {
        eval_with(
            source,
            json!({"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"replicas": 3}}),
            &[],
        )
    }

    fn yes(source: &str) {
        assert_eq!(eval(source), Ok(CelValue::Bool(true)), "{source}");
    }

    #[test]
    fn the_strings_extension_has_what_policies_use() {
        yes("'system:node:n1'.substring('system:node:n1'.lastIndexOf(':') + 1) == 'n1'");
        yes("'abc'.lastIndexOf('x') == -1");
        yes("'a:b:c'.lastIndexOf(':') == 3");
        yes("'tacocat'.substring(0, 4) == 'taco'");
        yes("'system:node:n1'.startsWith('system:node:')");
        yes("'a' + 'b' == 'ab'");
        yes("'A,b'.split(',').join('-').lowerAscii() == 'a-b'");
        assert!(eval("'abc'.substring(5)").is_err(), "out of range");
    }

    #[test]
    fn membership_presence_and_the_ternary() {
        yes("'system:nodes' in request.userInfo.groups");
        yes("!('system:masters' in request.userInfo.groups)");
        yes("'a' in object.metadata.labels && !('b' in object.metadata.labels)");
        yes("has(object.metadata.labels) && !has(object.spec.nodeName)");
        yes("(request.resource.group == '' ? 'core' : 'other') == 'core'");
        yes("object.spec.replicas + 1 == 4");
        yes("oldObject == null && object != null");
    }

    #[test]
    fn a_missing_field_is_an_error_and_names_the_expression() {
        let e = eval("object.spec.nodeName == 'n1'").expect_err("no such key");
        assert!(
            e.starts_with("expression 'object.spec.nodeName == 'n1'' resulted in error:"),
            "{e}"
        );
        assert!(e.contains("nodeName"), "{e}");
    }

    #[test]
    fn a_parse_error_is_a_compilation_error() {
        let e = eval("object.spec.(").expect_err("parse error");
        assert!(e.starts_with("compilation error: "), "{e}");
    }

    #[test]
    fn variables_are_lazy_ordered_and_named() {
        let vars = [
            ("name", "request.userInfo.username"),
            (
                "node",
                "variables.name.substring(variables.name.lastIndexOf(':') + 1)",
            ),
            ("broken", "object.nope.deeper"),
        ];
        let r = eval_with("variables.node == 'n1'", json!({}), &vars);
        assert_eq!(
            r,
            Ok(CelValue::Bool(true)),
            "a broken variable unused is no error"
        );
        let e = eval_with("variables.broken == 1", json!({}), &vars).expect_err("broken");
        assert!(e.contains("variables.broken"), "{e}");
        // A variable does not see those declared after it.
        let early = [("first", "variables.second"), ("second", "1")];
        assert!(eval_with("variables.first == 1", json!({}), &early).is_err());
        let r = eval_with(
            "'node' in variables && !('broken' in variables)",
            json!({}),
            &vars,
        );
        assert_eq!(r, Ok(CelValue::Bool(true)), "the map holds what evaluates");
    }

    #[test]
    fn kubernetes_list_functions() {
        yes("[1, 2, 3].indexOf(2) == 1 && [1, 2, 2].lastIndexOf(2) == 2 && [1].indexOf(5) == -1");
        yes("['a', 'b'].indexOf('b') == 1");
        yes("[1, 2, 2].isSorted() && !['b', 'a'].isSorted() && [].isSorted()");
        yes("[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3 && ['b', 'a'].max() == 'b'");
        yes("[1, 2, 3].sum() == 6 && [].sum() == 0 && [1.5, 2.5].sum() == 4.0");
        assert!(eval("[].min() == 0").is_err(), "min of nothing");
        assert!(eval("[1, 'a'].isSorted()").is_err(), "mixed types");
    }

    #[test]
    fn json_numbers_are_ints() {
        assert_eq!(to_cel(&json!(3)), CelValue::Int(3));
        assert_eq!(to_cel(&json!(u64::MAX)), CelValue::UInt(u64::MAX));
        assert_eq!(to_cel(&json!(0.5)), CelValue::Float(0.5));
    }
}
