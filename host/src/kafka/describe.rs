//! What the broker says this client may do with topics and groups: their authorized operations
//! (KIP-430), from librdkafka's DescribeTopics and DescribeConsumerGroups, which rdkafka 0.38 does
//! not wrap. The one place on the Kafka side that calls librdkafka's C API directly; every handle
//! it makes is freed by a guard, on every path.

use std::collections::BTreeSet;
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::time::Duration;

use anyhow::{bail, Result};
use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::ClientContext;
use rdkafka::types::RDKafkaErrorCode;

/// What the broker answered for one topic or group: the operations this client may perform on
/// it, or why it could not say (no Describe on it, it does not exist, …).
/// Operations are librdkafka's `rd_kafka_AclOperation_t` codes.
pub type Answer = Result<BTreeSet<i32>, (RDKafkaErrorCode, String)>;

/// Frees what a describe call made, whichever way it returns.
struct Guard {
    queue: *mut rd::rd_kafka_queue_t,
    options: *mut rd::rd_kafka_AdminOptions_t,
    event: *mut rd::rd_kafka_event_t,
}

impl Drop for Guard {
    fn drop(&mut self) {
        // SAFETY: each pointer is null or was returned by librdkafka for this call and is freed
        // once, here.
        unsafe {
            if !self.event.is_null() {
                rd::rd_kafka_event_destroy(self.event);
            }
            if !self.options.is_null() {
                rd::rd_kafka_AdminOptions_destroy(self.options);
            }
            if !self.queue.is_null() {
                rd::rd_kafka_queue_destroy(self.queue);
            }
        }
    }
}

fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: librdkafka returns NUL-terminated strings that live as long as their event.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Options for `api` asking for authorized operations, and a queue for the answer.
fn start<C: ClientContext>(
    admin: &AdminClient<C>,
    api: rd::rd_kafka_admin_op_t,
    timeout: Duration,
    authorized_operations: bool,
) -> Result<Guard> {
    let rk = admin.inner().native_ptr();
    // SAFETY: rk is a live client for the duration of the call (borrowed from `admin`).
    unsafe {
        let guard = Guard {
            queue: rd::rd_kafka_queue_new(rk),
            options: rd::rd_kafka_AdminOptions_new(rk, api),
            event: std::ptr::null_mut(),
        };
        let error = if authorized_operations {
            rd::rd_kafka_AdminOptions_set_include_authorized_operations(guard.options, 1)
        } else {
            std::ptr::null_mut()
        };
        if !error.is_null() {
            let why = text(rd::rd_kafka_error_string(error));
            rd::rd_kafka_error_destroy(error);
            bail!("asking for authorized operations: {why}");
        }
        let mut errstr = [0 as c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(
            guard.options,
            timeout.as_millis() as i32,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        Ok(guard)
    }
}

/// Waits for the answer on the guard's queue; the event stays owned by the guard.
fn wait(guard: &mut Guard, what: &str, timeout: Duration) -> Result<()> {
    // SAFETY: the queue is live; the event is destroyed by the guard.
    unsafe {
        // A little longer than the request timeout: librdkafka answers a timeout itself.
        guard.event = rd::rd_kafka_queue_poll(guard.queue, timeout.as_millis() as i32 + 1000);
        if guard.event.is_null() {
            bail!("{what}: no answer within {timeout:?}");
        }
        let code = rd::rd_kafka_event_error(guard.event);
        if code != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            bail!(
                "{what}: {:?}: {}",
                RDKafkaErrorCode::from(code),
                text(rd::rd_kafka_event_error_string(guard.event))
            );
        }
    }
    Ok(())
}

/// Reads an error or an operation list into an [`Answer`].
///
/// SAFETY: `error` is null or a live error; `ops` points to `count` operations (or is null).
unsafe fn answer(
    error: *const rd::rd_kafka_error_t,
    ops: *const rd::rd_kafka_AclOperation_t,
    count: usize,
) -> Answer {
    if !error.is_null() {
        let code = RDKafkaErrorCode::from(rd::rd_kafka_error_code(error));
        if code != RDKafkaErrorCode::NoError {
            return Err((code, text(rd::rd_kafka_error_string(error))));
        }
    }
    if ops.is_null() {
        return Ok(BTreeSet::new());
    }
    Ok(std::slice::from_raw_parts(ops, count)
        .iter()
        .map(|op| *op as i32)
        .collect())
}

fn c_strings(names: &[&str]) -> Result<Vec<CString>> {
    names
        .iter()
        .map(|n| CString::new(*n).map_err(|_| anyhow::anyhow!("{n:?} contains a NUL byte")))
        .collect()
}

/// The authorized operations of each of `topics` (an empty set when the broker did not say).
pub fn topics<C: ClientContext>(
    admin: &AdminClient<C>,
    topics: &[&str],
    timeout: Duration,
) -> Result<Vec<(String, Answer)>> {
    let names = c_strings(topics)?;
    let mut ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let mut guard = start(
        admin,
        rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
        timeout,
        true,
    )?;
    // SAFETY: the collection copies the names; it is destroyed below after the request is made.
    unsafe {
        let collection = rd::rd_kafka_TopicCollection_of_topic_names(ptrs.as_mut_ptr(), ptrs.len());
        rd::rd_kafka_DescribeTopics(
            admin.inner().native_ptr(),
            collection,
            guard.options,
            guard.queue,
        );
        rd::rd_kafka_TopicCollection_destroy(collection);
    }
    wait(&mut guard, "DescribeTopics", timeout)?;
    let mut out = Vec::new();
    // SAFETY: the result and its descriptions live as long as the event (owned by the guard).
    unsafe {
        let result = rd::rd_kafka_event_DescribeTopics_result(guard.event);
        let mut n = 0;
        let descriptions = rd::rd_kafka_DescribeTopics_result_topics(result, &mut n);
        for i in 0..n {
            let d = *descriptions.add(i);
            let mut count = 0;
            let ops = rd::rd_kafka_TopicDescription_authorized_operations(d, &mut count);
            out.push((
                text(rd::rd_kafka_TopicDescription_name(d)),
                answer(rd::rd_kafka_TopicDescription_error(d), ops, count),
            ));
        }
    }
    Ok(out)
}

/// The authorized operations of each of `groups` (an empty set when the broker did not say).
pub fn groups<C: ClientContext>(
    admin: &AdminClient<C>,
    groups: &[&str],
    timeout: Duration,
) -> Result<Vec<(String, Answer)>> {
    let names = c_strings(groups)?;
    let mut ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let mut guard = start(
        admin,
        rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS,
        timeout,
        true,
    )?;
    // SAFETY: librdkafka copies the names during the call.
    unsafe {
        rd::rd_kafka_DescribeConsumerGroups(
            admin.inner().native_ptr(),
            ptrs.as_mut_ptr(),
            ptrs.len(),
            guard.options,
            guard.queue,
        );
    }
    wait(&mut guard, "DescribeConsumerGroups", timeout)?;
    let mut out = Vec::new();
    // SAFETY: as in `topics`.
    unsafe {
        let result = rd::rd_kafka_event_DescribeConsumerGroups_result(guard.event);
        let mut n = 0;
        let descriptions = rd::rd_kafka_DescribeConsumerGroups_result_groups(result, &mut n);
        for i in 0..n {
            let d = *descriptions.add(i);
            let mut count = 0;
            let ops = rd::rd_kafka_ConsumerGroupDescription_authorized_operations(d, &mut count);
            out.push((
                text(rd::rd_kafka_ConsumerGroupDescription_group_id(d)),
                answer(rd::rd_kafka_ConsumerGroupDescription_error(d), ops, count),
            ));
        }
    }
    Ok(out)
}

/// Whether the broker `broker` lets this client read its configs (DescribeConfigs, which needs
/// DescribeConfigs on the cluster): `Ok(())`, or its refusal. rdkafka 0.38's `describe_configs`
/// drops a resource's own error and answers a refusal with an empty config list.
pub fn broker_configs(
    admin: &AdminClient<impl ClientContext>,
    broker: i32,
    timeout: Duration,
) -> Result<Result<(), (RDKafkaErrorCode, String)>> {
    let name = CString::new(broker.to_string())?;
    let mut guard = start(
        admin,
        rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS,
        timeout,
        false,
    )?;
    // SAFETY: librdkafka copies the resource during the call; it is destroyed right after.
    unsafe {
        let mut resource = rd::rd_kafka_ConfigResource_new(
            rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_BROKER,
            name.as_ptr(),
        );
        rd::rd_kafka_DescribeConfigs(
            admin.inner().native_ptr(),
            &mut resource,
            1,
            guard.options,
            guard.queue,
        );
        rd::rd_kafka_ConfigResource_destroy(resource);
    }
    wait(&mut guard, "DescribeConfigs", timeout)?;
    // SAFETY: as in `topics`.
    unsafe {
        let result = rd::rd_kafka_event_DescribeConfigs_result(guard.event);
        let mut n = 0;
        let resources = rd::rd_kafka_DescribeConfigs_result_resources(result, &mut n);
        if n == 0 {
            bail!("DescribeConfigs answered nothing");
        }
        let r = *resources;
        let code = RDKafkaErrorCode::from(rd::rd_kafka_ConfigResource_error(r));
        Ok(if code == RDKafkaErrorCode::NoError {
            Ok(())
        } else {
            Err((code, text(rd::rd_kafka_ConfigResource_error_string(r))))
        })
    }
}
