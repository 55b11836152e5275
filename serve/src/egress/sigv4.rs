//! AWS Signature Version 4 (the `Authorization` header), as a pure function of the request,
//! the credentials and the time: tested against AWS's published examples.

use super::crypto::{hex, hmac_sha256, sha256_hex, uri_encode};

/// What SigV4 signs of a request.
#[derive(Clone, Copy, Debug)]
pub struct Signed<'a> {
    /// The method (`PUT`).
    pub method: &'a str,
    /// The canonical URI: the path, each segment already URI-encoded (S3 does not encode
    /// it twice).
    pub path: &'a str,
    /// The query's name/value pairs, not encoded (encoded and sorted here).
    pub query: &'a [(String, String)],
    /// The headers signed (names in any case; `host` and `x-amz-date` among them).
    pub headers: &'a [(String, String)],
    /// The payload's SHA-256 in lowercase hex (or `UNSIGNED-PAYLOAD`).
    pub payload_sha256: &'a str,
}

/// Where and when the request is signed.
#[derive(Clone, Copy, Debug)]
pub struct Scope<'a> {
    /// `X-Amz-Date`'s value, `YYYYMMDDTHHMMSSZ`.
    pub amz_date: &'a str,
    /// The region (`us-east-1`).
    pub region: &'a str,
    /// The service (`s3`).
    pub service: &'a str,
}

/// The canonical request (AWS's "Create a canonical request").
pub fn canonical_request(req: &Signed<'_>) -> (String, String) {
    let mut query: Vec<(String, String)> = req
        .query
        .iter()
        .map(|(k, v)| (uri_encode(k, false), uri_encode(v, false)))
        .collect();
    query.sort();
    let query = query
        .iter()
        .map(|(k, v)| format!("{}={}", k, v))
        .collect::<Vec<_>>()
        .join("&");
    let mut headers: Vec<(String, String)> = req
        .headers
        .iter()
        .map(|(k, v)| {
            // Trimmed, inner runs of spaces folded to one.
            let v = v.split_whitespace().collect::<Vec<_>>().join(" ");
            (k.to_ascii_lowercase(), v)
        })
        .collect();
    headers.sort();
    let canonical_headers: String = headers
        .iter()
        .map(|(k, v)| format!("{}:{}\n", k, v))
        .collect();
    let signed_headers = headers
        .iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let path = if req.path.is_empty() { "/" } else { req.path };
    let canonical = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        req.method, path, query, canonical_headers, signed_headers, req.payload_sha256
    );
    (canonical, signed_headers)
}

/// The `Authorization` header's value for `req`, signed with `secret` for `access_key_id`
/// at `scope`.
pub fn authorization(
    req: &Signed<'_>,
    scope: &Scope<'_>,
    access_key_id: &str,
    secret: &str,
) -> String {
    let (canonical, signed_headers) = canonical_request(req);
    let date = &scope.amz_date[..scope.amz_date.len().min(8)];
    let credential_scope = format!("{}/{}/{}/aws4_request", date, scope.region, scope.service);
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{}\n{}",
        scope.amz_date,
        credential_scope,
        sha256_hex(canonical.as_bytes())
    );
    let k_date = hmac_sha256(format!("AWS4{}", secret).as_bytes(), date.as_bytes());
    let k_region = hmac_sha256(&k_date, scope.region.as_bytes());
    let k_service = hmac_sha256(&k_region, scope.service.as_bytes());
    let k_signing = hmac_sha256(&k_service, b"aws4_request");
    let signature = hex(&hmac_sha256(&k_signing, string_to_sign.as_bytes()));
    format!(
        "AWS4-HMAC-SHA256 Credential={}/{}, SignedHeaders={}, Signature={}",
        access_key_id, credential_scope, signed_headers, signature
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    /// AWS's SigV4 test suite, `get-vanilla`.
    #[test]
    fn sigv4_matches_the_aws_test_suite_get_vanilla() {
        let headers = h(&[
            ("Host", "example.amazonaws.com"),
            ("X-Amz-Date", "20150830T123600Z"),
        ]);
        let req = Signed {
            method: "GET",
            path: "/",
            query: &[],
            headers: &headers,
            payload_sha256: EMPTY,
        };
        let scope = Scope {
            amz_date: "20150830T123600Z",
            region: "us-east-1",
            service: "service",
        };
        assert_eq!(
            authorization(
                &req,
                &scope,
                "AKIDEXAMPLE",
                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
            ),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
    }

    /// The S3 documentation's "GET Object" example (header-based authentication).
    #[test]
    fn sigv4_matches_the_s3_get_object_example() {
        let headers = h(&[
            ("Host", "examplebucket.s3.amazonaws.com"),
            ("Range", "bytes=0-9"),
            ("x-amz-content-sha256", EMPTY),
            ("x-amz-date", "20130524T000000Z"),
        ]);
        let req = Signed {
            method: "GET",
            path: "/test.txt",
            query: &[],
            headers: &headers,
            payload_sha256: EMPTY,
        };
        let scope = Scope {
            amz_date: "20130524T000000Z",
            region: "us-east-1",
            service: "s3",
        };
        assert_eq!(
            authorization(
                &req,
                &scope,
                "AKIAIOSFODNN7EXAMPLE",
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
            ),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    /// The S3 documentation's "GET Bucket Lifecycle" example: a query without a value.
    #[test]
    fn sigv4_signs_a_query_parameter_without_value() {
        let headers = h(&[
            ("Host", "examplebucket.s3.amazonaws.com"),
            ("x-amz-content-sha256", EMPTY),
            ("x-amz-date", "20130524T000000Z"),
        ]);
        let query = h(&[("lifecycle", "")]);
        let req = Signed {
            method: "GET",
            path: "/",
            query: &query,
            headers: &headers,
            payload_sha256: EMPTY,
        };
        let scope = Scope {
            amz_date: "20130524T000000Z",
            region: "us-east-1",
            service: "s3",
        };
        assert!(authorization(
            &req,
            &scope,
            "AKIAIOSFODNN7EXAMPLE",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
        )
        .ends_with("Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"));
    }
}
