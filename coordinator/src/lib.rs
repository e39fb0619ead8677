//! The coordinator: gRPC services, scheduler, durable state, leasing, commit, Flight.
