#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The JSON shapes of etcd v3's gRPC gateway (`/v3/kv/...`, `/v3/lease/...`, `/v3/watch`), only
/// the fields Parley reads or writes. The gateway writes 64-bit integers as strings and
/// leaves out every field at its default (false, 0, empty), so each is optional here; keys
/// and values travel in base64.
enum EtcdMessages {
    static func encode(_ text: String) -> String { encode(Array(text.utf8)) }
    static func encode(_ bytes: [UInt8]) -> String { Data(bytes).base64EncodedString() }

    /// The end of the range holding every key that starts with `prefix`: the prefix with
    /// its last byte increased (Parley's prefixes end in '/', so it never overflows).
    static func prefixEnd(_ prefix: String) -> String {
        var bytes = Array(prefix.utf8)
        bytes[bytes.count - 1] &+= 1
        return String(decoding: bytes, as: UTF8.self)
    }

    struct Header: Decodable {
        var revision: String?
    }

    struct KeyValue: Decodable {
        var key: String?
        var value: String?
        var create_revision: String?
        var mod_revision: String?
        var lease: String?
    }

    struct RangeRequest: Encodable {
        var key: String
        var range_end: String?
    }

    struct RangeResponse: Decodable {
        var header: Header?
        var kvs: [KeyValue]?
    }

    struct PutRequest: Encodable {
        var key: String
        var value: String
        var lease: String?
    }

    struct DeleteRangeRequest: Encodable {
        var key: String
        var range_end: String?
    }

    struct Compare: Encodable {
        var key: String
        var target: String
        var result: String = "EQUAL"
        var create_revision: String?
        var value: String?
    }

    struct RequestOp: Encodable {
        var request_put: PutRequest?
        var request_range: RangeRequest?
        var request_delete_range: DeleteRangeRequest?
    }

    struct TxnRequest: Encodable {
        var compare: [Compare]
        var success: [RequestOp]
        var failure: [RequestOp]
    }

    struct ResponseOp: Decodable {
        var response_range: RangeResponse?
    }

    struct TxnResponse: Decodable {
        var header: Header?
        var succeeded: Bool?
        var responses: [ResponseOp]?
    }

    struct LeaseGrantRequest: Encodable {
        var TTL: String
    }

    struct LeaseGrantResponse: Decodable {
        var ID: String?
        var TTL: String?
    }

    struct LeaseRequest: Encodable {
        var ID: String
    }

    struct LeaseKeepAliveResult: Decodable {
        var ID: String?
        var TTL: String?
    }

    /// The keepalive and watch endpoints are streams: each message arrives as `{"result": …}`.
    struct Streamed<Result: Decodable>: Decodable {
        var result: Result?
        var error: GatewayError?
    }

    struct WatchCreate: Encodable {
        struct Body: Encodable {
            var key: String
            var range_end: String
            var start_revision: String?
        }
        var create_request: Body
    }

    struct WatchEvent: Decodable {
        /// Absent for a put (the enum's default), "DELETE" for a deletion.
        var type: String?
        var kv: KeyValue?
    }

    struct WatchResult: Decodable {
        var header: Header?
        var created: Bool?
        var canceled: Bool?
        var compact_revision: String?
        var cancel_reason: String?
        var events: [WatchEvent]?
    }

    /// `/v3/auth/authenticate`: a user's name and password for a token, which later requests
    /// carry in their `Authorization` header.
    struct AuthenticateRequest: Encodable {
        var name: String
        var password: String
    }

    struct AuthenticateResponse: Decodable {
        var token: String?
    }

    /// What the gateway answers instead when a request fails (`code` is the gRPC status).
    struct GatewayError: Decodable {
        var error: String?
        var message: String?
        var code: Int?
    }
}
