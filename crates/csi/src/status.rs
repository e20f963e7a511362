//! gRPC status codes and errors spelled the way Go prints them, for metrics labels and logs.

use std::time::Duration;

use tonic::{Code, Status};

/// The name Go's `codes.Code.String()` gives a status code (note `Canceled`, one `l`).
pub fn go_code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// A status as grpc-go's `err.Error()` prints it: `rpc error: code = NotFound desc = ...`.
/// Upstream puts this text into logs and Kubernetes events.
pub fn go_error_string(status: &Status) -> String {
    format!(
        "rpc error: code = {} desc = {}",
        go_code_name(status.code()),
        status.message()
    )
}

/// The message of a call that hit the local `--timeout`, as Go's context reports it.
pub const DEADLINE_EXCEEDED_MESSAGE: &str = "context deadline exceeded";

/// The status of a call that failed after `elapsed` under a deadline of `timeout`.
///
/// tonic enforces the `grpc-timeout` header itself (on the client's channel and in tonic
/// servers) and reports `Cancelled: Timeout expired`, where grpc-go reports
/// `DeadlineExceeded`. Once the deadline has passed, a `Cancelled` is the deadline, so it is
/// reported as Go would; everything else passes through.
pub fn deadline_status(status: Status, elapsed: Duration, timeout: Duration) -> Status {
    if status.code() == Code::Cancelled && elapsed >= timeout {
        Status::deadline_exceeded(DEADLINE_EXCEEDED_MESSAGE)
    } else {
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_code_names() {
        let cases = [
            (0, "OK"),
            (1, "Canceled"),
            (2, "Unknown"),
            (3, "InvalidArgument"),
            (4, "DeadlineExceeded"),
            (5, "NotFound"),
            (6, "AlreadyExists"),
            (7, "PermissionDenied"),
            (8, "ResourceExhausted"),
            (9, "FailedPrecondition"),
            (10, "Aborted"),
            (11, "OutOfRange"),
            (12, "Unimplemented"),
            (13, "Internal"),
            (14, "Unavailable"),
            (15, "DataLoss"),
            (16, "Unauthenticated"),
        ];
        for (number, name) in cases {
            assert_eq!(go_code_name(Code::from_i32(number)), name, "code {number}");
        }
    }

    #[test]
    fn cancelled_after_the_deadline_is_the_deadline() {
        let t = Duration::from_secs(10);
        let cases = [
            (
                Status::cancelled("Timeout expired"),
                t,
                Code::DeadlineExceeded,
            ),
            (
                Status::cancelled("Timeout expired"),
                t * 2,
                Code::DeadlineExceeded,
            ),
            (Status::cancelled("driver gave up"), t / 2, Code::Cancelled),
            (Status::internal("boom"), t * 2, Code::Internal),
            (
                Status::deadline_exceeded("server"),
                t / 2,
                Code::DeadlineExceeded,
            ),
        ];
        for (status, elapsed, want) in cases {
            let got = deadline_status(status.clone(), elapsed, t);
            assert_eq!(got.code(), want, "{status:?} after {elapsed:?}");
            if want == Code::DeadlineExceeded && status.code() == Code::Cancelled {
                assert_eq!(got.message(), DEADLINE_EXCEEDED_MESSAGE);
            }
        }
    }

    #[test]
    fn go_error_strings() {
        let cases = [
            (
                Status::not_found("no volume v1"),
                "rpc error: code = NotFound desc = no volume v1",
            ),
            (
                Status::deadline_exceeded(DEADLINE_EXCEEDED_MESSAGE),
                "rpc error: code = DeadlineExceeded desc = context deadline exceeded",
            ),
            (Status::cancelled(""), "rpc error: code = Canceled desc = "),
        ];
        for (status, want) in cases {
            assert_eq!(go_error_string(&status), want);
        }
    }
}
