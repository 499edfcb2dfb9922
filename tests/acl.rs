//! ACLs on a secured test broker ([`Kafka::start_secured`]): [`Kafka::grant`] and
//! [`Kafka::revoke`] run as the super user and return once the broker enforces the change.
//!
//! rdkafka 0.38's `AdminClient` has no ACL calls, so this module speaks librdkafka's C admin API
//! (`rd_kafka_CreateAcls`, `rd_kafka_DeleteAcls`, `rd_kafka_DescribeAcls`) through the raw handle
//! of an rdkafka admin client, on a result queue of its own. Every librdkafka object made here is
//! held by a guard that frees it on every path; what a result event hands out is borrowed from the
//! event and read before the event's guard drops. Depends on `broker` (the super user's client).

use std::ffi::{CStr, CString};
use std::fmt;
use std::os::raw::c_char;
use std::time::{Duration, Instant};

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::DefaultClientContext;

use crate::broker::Kafka;

/// How long the broker may take to answer one ACL request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a created (deleted) ACL may take to show in the broker's authorizer.
const APPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// What kind of resource an [`Acl`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceType {
    Topic,
    Group,
    /// The one cluster resource, named `kafka-cluster` ([`Acl::cluster`]).
    Cluster,
    TransactionalId,
}

/// How an [`Acl`]'s name selects resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// The resource of exactly that name.
    Literal,
    /// Every resource whose name starts with it.
    Prefixed,
}

/// What an [`Acl`] allows. Kafka implies `Describe` from `Read`, `Write`, `Delete` and `Alter`,
/// and `DescribeConfigs` from `AlterConfigs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Read,
    Write,
    Create,
    Delete,
    Describe,
    DescribeConfigs,
    Alter,
    AlterConfigs,
    IdempotentWrite,
    All,
}

/// One rule that allows `principal` (`User:<name>`) to do `operation` on the resources `name`
/// selects, from any host. (Deny rules are not needed by the tests: what no ACL allows is
/// denied, `allow.everyone.if.no.acl.found=false`.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    pub resource: ResourceType,
    pub name: String,
    pub pattern: Pattern,
    pub operation: Operation,
    pub principal: String,
}

impl Acl {
    /// `principal` may do `operation` on the topic `name`.
    pub fn topic(name: &str, operation: Operation, principal: &str) -> Acl {
        Acl::literal(ResourceType::Topic, name, operation, principal)
    }

    /// `principal` may do `operation` on the consumer group `name`.
    pub fn group(name: &str, operation: Operation, principal: &str) -> Acl {
        Acl::literal(ResourceType::Group, name, operation, principal)
    }

    /// `principal` may do `operation` on the transactional id `name`.
    pub fn transactional_id(name: &str, operation: Operation, principal: &str) -> Acl {
        Acl::literal(ResourceType::TransactionalId, name, operation, principal)
    }

    /// `principal` may do `operation` on the cluster (e.g. `IdempotentWrite`, `Create`).
    pub fn cluster(operation: Operation, principal: &str) -> Acl {
        Acl::literal(ResourceType::Cluster, "kafka-cluster", operation, principal)
    }

    /// The same rule for every resource whose name starts with this one's.
    pub fn prefixed(self) -> Acl {
        Acl {
            pattern: Pattern::Prefixed,
            ..self
        }
    }

    fn literal(resource: ResourceType, name: &str, operation: Operation, principal: &str) -> Acl {
        Acl {
            resource,
            name: name.to_owned(),
            pattern: Pattern::Literal,
            operation,
            principal: principal.to_owned(),
        }
    }
}

impl fmt::Display for Acl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pattern = match self.pattern {
            Pattern::Literal => "",
            Pattern::Prefixed => " (prefix)",
        };
        write!(
            f,
            "{} may {:?} {:?} {:?}{pattern}",
            self.principal, self.operation, self.resource, self.name
        )
    }
}

impl Kafka {
    /// Creates `acls` as the super user; returns once the broker's authorizer has them.
    pub fn grant(&self, acls: &[Acl]) {
        let admin = self.acl_admin();
        create_acls(&admin, acls).unwrap_or_else(|e| panic!("granting ACLs: {e}"));
        wait_described(&admin, acls, true);
    }

    /// Deletes `acls` (those that exist) as the super user; returns once the broker's authorizer
    /// no longer has them.
    pub fn revoke(&self, acls: &[Acl]) {
        let admin = self.acl_admin();
        delete_acls(&admin, acls).unwrap_or_else(|e| panic!("revoking ACLs: {e}"));
        wait_described(&admin, acls, false);
    }

    fn acl_admin(&self) -> AdminClient<DefaultClientContext> {
        assert!(
            self.security.is_some(),
            "the broker on {} is plaintext and has no authorizer: start it with Kafka::start_secured",
            self.bootstrap
        );
        self.client()
            .create()
            .unwrap_or_else(|e| panic!("an admin client for {}: {e}", self.bootstrap))
    }
}

/// Polls the broker's ACLs until each of `acls` is there (`present`) or gone.
fn wait_described(admin: &AdminClient<DefaultClientContext>, acls: &[Acl], present: bool) {
    let deadline = Instant::now() + APPLY_TIMEOUT;
    for acl in acls {
        loop {
            let found =
                describe_acl(admin, acl).unwrap_or_else(|e| panic!("describing {acl}: {e}"));
            if (found > 0) == present {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{acl}: still {} after {APPLY_TIMEOUT:?}",
                if present { "missing" } else { "there" }
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn create_acls(admin: &AdminClient<DefaultClientContext>, acls: &[Acl]) -> Result<(), String> {
    let mut bindings = Bindings::new(acls, Kind::Binding)?;
    let event = request(
        admin,
        rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_CREATEACLS,
        rd::RD_KAFKA_EVENT_CREATEACLS_RESULT,
        |rk, options, queue| unsafe {
            // librdkafka copies the bindings: ours are freed when `bindings` drops.
            rd::rd_kafka_CreateAcls(rk, bindings.as_mut_ptr(), bindings.len(), options, queue)
        },
    )?;
    unsafe {
        let result = rd::rd_kafka_event_CreateAcls_result(event.0);
        let mut count = 0;
        let results = rd::rd_kafka_CreateAcls_result_acls(result, &mut count);
        failures(acls, count, |i| {
            rd::rd_kafka_acl_result_error(*results.add(i))
        })
    }
}

/// The errors of a CreateAcls or DeleteAcls result, one per binding in the request's order
/// (`error(i)` is null where it succeeded), each named by its ACL.
fn failures(
    acls: &[Acl],
    count: usize,
    error: impl Fn(usize) -> *const rd::rd_kafka_error_t,
) -> Result<(), String> {
    let mut failures = Vec::new();
    for i in 0..count {
        let e = error(i);
        if !e.is_null() {
            let acl = acls
                .get(i)
                .map_or_else(|| format!("ACL {i}"), Acl::to_string);
            failures.push(format!("{acl}: {}", unsafe {
                text(rd::rd_kafka_error_string(e))
            }));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

fn delete_acls(admin: &AdminClient<DefaultClientContext>, acls: &[Acl]) -> Result<(), String> {
    let mut filters = Bindings::new(acls, Kind::Filter)?;
    let event = request(
        admin,
        rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DELETEACLS,
        rd::RD_KAFKA_EVENT_DELETEACLS_RESULT,
        |rk, options, queue| unsafe {
            rd::rd_kafka_DeleteAcls(rk, filters.as_mut_ptr(), filters.len(), options, queue)
        },
    )?;
    unsafe {
        let result = rd::rd_kafka_event_DeleteAcls_result(event.0);
        let mut count = 0;
        let responses = rd::rd_kafka_DeleteAcls_result_responses(result, &mut count);
        failures(acls, count, |i| {
            rd::rd_kafka_DeleteAcls_result_response_error(*responses.add(i))
        })
    }
}

/// How many of the broker's ACLs are exactly `acl` (0 or 1).
fn describe_acl(admin: &AdminClient<DefaultClientContext>, acl: &Acl) -> Result<usize, String> {
    let mut filter = Bindings::new(std::slice::from_ref(acl), Kind::Filter)?;
    let event = request(
        admin,
        rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBEACLS,
        rd::RD_KAFKA_EVENT_DESCRIBEACLS_RESULT,
        |rk, options, queue| unsafe {
            rd::rd_kafka_DescribeAcls(rk, *filter.as_mut_ptr(), options, queue)
        },
    )?;
    let mut count = 0;
    unsafe {
        let result = rd::rd_kafka_event_DescribeAcls_result(event.0);
        rd::rd_kafka_DescribeAcls_result_acls(result, &mut count);
    }
    Ok(count)
}

/// Sends one admin request (`submit(handle, options, result queue)`) and waits for its result
/// event, of type `expected`; the request as a whole failing is an `Err`, the event otherwise
/// (whose per-ACL results the caller reads).
fn request(
    admin: &AdminClient<DefaultClientContext>,
    op: rd::rd_kafka_admin_op_t,
    expected: i32,
    submit: impl FnOnce(
        *mut rd::rd_kafka_t,
        *const rd::rd_kafka_AdminOptions_t,
        *mut rd::rd_kafka_queue_t,
    ),
) -> Result<Event, String> {
    // The handle outlives everything made from it here: `admin` is borrowed for this whole call.
    let rk = admin.inner().native_ptr();
    unsafe {
        let queue = Queue(rd::rd_kafka_queue_new(rk));
        let options = Options(rd::rd_kafka_AdminOptions_new(rk, op));
        let mut errstr = [0 as c_char; 512];
        let err = rd::rd_kafka_AdminOptions_set_request_timeout(
            options.0,
            REQUEST_TIMEOUT.as_millis() as i32,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(format!("admin options: {}", text(errstr.as_ptr())));
        }
        submit(rk, options.0, queue.0);
        // librdkafka answers every request by its timeout at the latest; the margin only covers
        // a stuck client.
        let wait = REQUEST_TIMEOUT + Duration::from_secs(5);
        let event = rd::rd_kafka_queue_poll(queue.0, wait.as_millis() as i32);
        if event.is_null() {
            return Err(format!("no answer after {wait:?}"));
        }
        let event = Event(event);
        let kind = rd::rd_kafka_event_type(event.0);
        if kind != expected {
            return Err(format!(
                "expected event {expected}, got {kind} ({})",
                text(rd::rd_kafka_event_name(event.0))
            ));
        }
        if rd::rd_kafka_event_error(event.0) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            return Err(text(rd::rd_kafka_event_error_string(event.0)));
        }
        Ok(event)
    }
}

/// What [`Bindings::new`] makes of an [`Acl`]: a rule to create, or a filter that matches
/// exactly that rule (to delete or describe it).
#[derive(Clone, Copy)]
enum Kind {
    Binding,
    Filter,
}

/// librdkafka ACL bindings (or binding filters, the same type), destroyed on drop.
struct Bindings(Vec<*mut rd::rd_kafka_AclBinding_t>);

impl Bindings {
    fn new(acls: &[Acl], kind: Kind) -> Result<Bindings, String> {
        let mut bindings = Bindings(Vec::with_capacity(acls.len()));
        for acl in acls {
            let cstring =
                |s: &str| CString::new(s).map_err(|_| format!("{acl}: a name with a NUL byte"));
            let (name, principal, host) =
                (cstring(&acl.name)?, cstring(&acl.principal)?, cstring("*")?);
            let make = match kind {
                Kind::Binding => rd::rd_kafka_AclBinding_new,
                Kind::Filter => rd::rd_kafka_AclBindingFilter_new,
            };
            let mut errstr = [0 as c_char; 512];
            let binding = unsafe {
                make(
                    resource_type(acl.resource),
                    name.as_ptr(),
                    pattern_type(acl.pattern),
                    principal.as_ptr(),
                    host.as_ptr(),
                    operation(acl.operation),
                    rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW,
                    errstr.as_mut_ptr(),
                    errstr.len(),
                )
            };
            if binding.is_null() {
                return Err(format!("{acl}: {}", unsafe { text(errstr.as_ptr()) }));
            }
            bindings.0.push(binding);
        }
        Ok(bindings)
    }

    fn as_mut_ptr(&mut self) -> *mut *mut rd::rd_kafka_AclBinding_t {
        self.0.as_mut_ptr()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

impl Drop for Bindings {
    fn drop(&mut self) {
        for &binding in &self.0 {
            unsafe { rd::rd_kafka_AclBinding_destroy(binding) }
        }
    }
}

/// A result queue, destroyed on drop.
struct Queue(*mut rd::rd_kafka_queue_t);

impl Drop for Queue {
    fn drop(&mut self) {
        unsafe { rd::rd_kafka_queue_destroy(self.0) }
    }
}

/// Admin request options, destroyed on drop.
struct Options(*mut rd::rd_kafka_AdminOptions_t);

impl Drop for Options {
    fn drop(&mut self) {
        unsafe { rd::rd_kafka_AdminOptions_destroy(self.0) }
    }
}

/// A result event, destroyed on drop (with every result it holds).
struct Event(*mut rd::rd_kafka_event_t);

impl Drop for Event {
    fn drop(&mut self) {
        unsafe { rd::rd_kafka_event_destroy(self.0) }
    }
}

fn resource_type(resource: ResourceType) -> rd::rd_kafka_ResourceType_t {
    use rd::rd_kafka_ResourceType_t::*;
    match resource {
        ResourceType::Topic => RD_KAFKA_RESOURCE_TOPIC,
        ResourceType::Group => RD_KAFKA_RESOURCE_GROUP,
        // librdkafka calls Kafka's CLUSTER resource type (code 4) BROKER.
        ResourceType::Cluster => RD_KAFKA_RESOURCE_BROKER,
        ResourceType::TransactionalId => RD_KAFKA_RESOURCE_TRANSACTIONAL_ID,
    }
}

fn pattern_type(pattern: Pattern) -> rd::rd_kafka_ResourcePatternType_t {
    use rd::rd_kafka_ResourcePatternType_t::*;
    match pattern {
        Pattern::Literal => RD_KAFKA_RESOURCE_PATTERN_LITERAL,
        Pattern::Prefixed => RD_KAFKA_RESOURCE_PATTERN_PREFIXED,
    }
}

fn operation(operation: Operation) -> rd::rd_kafka_AclOperation_t {
    use rd::rd_kafka_AclOperation_t::*;
    match operation {
        Operation::Read => RD_KAFKA_ACL_OPERATION_READ,
        Operation::Write => RD_KAFKA_ACL_OPERATION_WRITE,
        Operation::Create => RD_KAFKA_ACL_OPERATION_CREATE,
        Operation::Delete => RD_KAFKA_ACL_OPERATION_DELETE,
        Operation::Describe => RD_KAFKA_ACL_OPERATION_DESCRIBE,
        Operation::DescribeConfigs => RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS,
        Operation::Alter => RD_KAFKA_ACL_OPERATION_ALTER,
        Operation::AlterConfigs => RD_KAFKA_ACL_OPERATION_ALTER_CONFIGS,
        Operation::IdempotentWrite => RD_KAFKA_ACL_OPERATION_IDEMPOTENT_WRITE,
        Operation::All => RD_KAFKA_ACL_OPERATION_ALL,
    }
}

/// A C string from librdkafka (null: empty), copied.
///
/// # Safety
/// `s` is null or a NUL-terminated string valid for this call.
unsafe fn text(s: *const c_char) -> String {
    if s.is_null() {
        String::new()
    } else {
        CStr::from_ptr(s).to_string_lossy().into_owned()
    }
}
