"""The SASL state machine without sockets or an event loop: handshake and tokens in, answers out,
with an injected clock (KIP-152 order, PLAIN and SCRAM, failures, KIP-368 re-authentication)."""

from __future__ import annotations

import scramp
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from onceflow.broker.security.config import SaslSettings
from onceflow.broker.security.principal import user
from onceflow.broker.security.sasl_authenticator import PASS, Close, Reply, SaslAuthenticator, State
from onceflow.broker.security.scram import credential_from_password
from onceflow.protocol.errors import ErrorCode

HANDSHAKE, AUTHENTICATE, VERSIONS, METADATA, PRODUCE = 17, 36, 18, 3, 0
CREDENTIALS = {
    ("alice", "SCRAM-SHA-512"): credential_from_password("SCRAM-SHA-512", "alice-secret"),
    ("alice", "SCRAM-SHA-256"): credential_from_password("SCRAM-SHA-256", "alice-secret"),
}


def settings_(reauth_ms: int = 0) -> SaslSettings:
    mechanisms = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    return SaslSettings(
        mechanisms=mechanisms,
        plain_users={"bob": "bob-secret"},
        reauth_ms=dict.fromkeys(mechanisms, reauth_ms),
        failed_authentication_delay_ms=100,
        max_receive_size=524288,
    )


def authenticator(reauth_ms: int = 0) -> SaslAuthenticator:
    return SaslAuthenticator(settings_(reauth_ms), lambda name, mechanism: CREDENTIALS.get((name, mechanism)))


def handshake(auth, mechanism, now=0):
    return auth.receive(HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism), now)


def token(auth, data: bytes, now=0, version=2):
    return auth.receive(AUTHENTICATE, version, SaslAuthenticateRequest(auth_bytes=data), now)


def scram_login(auth, password="alice-secret", mechanism="SCRAM-SHA-512", now=0, tamper=None):
    client = scramp.ScramClient([mechanism], "alice", password)
    assert handshake(auth, mechanism, now).response.error_code == 0
    first = token(auth, client.get_client_first().encode(), now)
    assert isinstance(first, Reply) and not first.failed
    client.set_server_first(bytes(first.response.auth_bytes).decode())
    final = client.get_client_final()
    if tamper is not None:
        final = tamper(final)
    answer = token(auth, final.encode(), now)
    if not answer.failed:
        client.set_server_final(bytes(answer.response.auth_bytes).decode())  # the server proved itself
    return answer


def test_api_versions_then_plain():
    auth = authenticator()
    assert auth.receive(VERSIONS, 3, ApiVersionsRequest(), 0) is PASS
    reply = handshake(auth, "PLAIN")
    assert reply.response.error_code == 0 and "PLAIN" in reply.response.mechanisms
    done = token(auth, b"\x00bob\x00bob-secret")
    assert done.response.error_code == 0 and done.principal == user("bob")
    assert auth.receive(METADATA, 12, object(), 0) is PASS  # authenticated: everything is dispatched


def test_scram_sha_512_and_256():
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        auth = authenticator()
        done = scram_login(auth, mechanism=mechanism)
        assert done.principal == user("alice") and auth.state is State.COMPLETE


def test_wrong_password_wrong_proof_and_wrong_nonce_fail_with_the_generic_message():
    generic = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
    tampered = [
        None,  # wrong password
        lambda final: final.rsplit(",p=", 1)[0] + ",p=" + "A" * 88,  # a proof that is not the proof
        lambda final: final.replace(",r=", ",r=x", 1),  # a nonce that is not the nonce
    ]
    for tamper in tampered:
        auth = authenticator()
        reply = scram_login(auth, password="wrong" if tamper is None else "alice-secret", tamper=tamper)
        assert reply.failed and reply.response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert reply.response.error_message == generic
        assert auth.principal is None and isinstance(auth.receive(METADATA, 12, object(), 0), Close)


def test_unknown_scram_user_gets_the_same_answer_as_a_wrong_password():
    auth = authenticator()
    handshake(auth, "SCRAM-SHA-512")
    client = scramp.ScramClient(["SCRAM-SHA-512"], "nobody", "x")
    reply = token(auth, client.get_client_first().encode())
    assert reply.failed and "invalid credentials" in reply.response.error_message


def test_plain_failures_carry_kafkas_messages():
    cases = {
        b"\x00bob\x00nope": "Authentication failed: Invalid username or password",
        b"\x00eve\x00x": "Authentication failed: Invalid username or password",
        b"\x00\x00x": "Authentication failed: username not specified",
        b"bob": "Invalid SASL/PLAIN response: expected 3 tokens, got 1",
        b"other\x00bob\x00bob-secret": "Client requested an authorization id that is different from username",
    }
    for data, words in cases.items():
        auth = authenticator()
        handshake(auth, "PLAIN")
        reply = token(auth, data)
        assert reply.failed and words in reply.response.error_message


def test_requests_before_authentication_close_the_connection():
    for api in (PRODUCE, METADATA, AUTHENTICATE):
        auth = authenticator()
        assert isinstance(auth.receive(api, 0, object(), 0), Close)
    auth = authenticator()
    auth.receive(VERSIONS, 3, ApiVersionsRequest(), 0)
    assert isinstance(auth.receive(VERSIONS, 3, ApiVersionsRequest(), 0), Close)  # once only, as Kafka
    auth = authenticator()
    handshake(auth, "PLAIN")
    assert isinstance(auth.receive(METADATA, 12, object(), 0), Close)
    assert isinstance(handshake(auth, "PLAIN"), Close)  # the state machine has failed for good
    auth = authenticator()
    handshake(auth, "PLAIN")
    second = handshake(auth, "PLAIN")
    assert second.failed and second.response.error_code == ErrorCode.ILLEGAL_SASL_STATE


def test_unsupported_mechanism_fails_listing_the_enabled_ones():
    auth = authenticator()
    reply = handshake(auth, "GSSAPI")
    assert reply.failed and reply.response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert reply.response.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def test_a_v0_handshake_is_refused_clearly():
    """v0 is listed for librdkafka's sake, but what would follow it (raw tokens) is not spoken."""
    auth = authenticator()
    reply = auth.receive(HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN"), 0)
    assert reply.failed and reply.response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert "v0" in reply.reason
    assert isinstance(token(auth, b"\x00bob\x00bob-secret"), Close)


def test_session_lifetime_expiry_and_reauthentication():
    auth = authenticator(reauth_ms=10_000)
    done = scram_login(auth, now=0)
    assert done.response.session_lifetime_ms == 10_000
    assert auth.receive(METADATA, 12, object(), 5_000) is PASS
    # Re-authenticate before the end: the same principal, a new end.
    again = scram_login(auth, now=9_000)
    assert again.principal == user("alice") and auth.session_end_ms == 19_000
    assert auth.receive(METADATA, 12, object(), 18_000) is PASS
    assert isinstance(auth.receive(METADATA, 12, object(), 19_001), Close)  # the session ended


def test_reauthentication_cannot_change_the_principal_or_mechanism():
    auth = authenticator(reauth_ms=10_000)
    scram_login(auth, now=0)
    handshake(auth, "SCRAM-SHA-512", now=2_000)
    other = scramp.ScramClient(["SCRAM-SHA-512"], "mallory", "x")
    CREDENTIALS[("mallory", "SCRAM-SHA-512")] = credential_from_password("SCRAM-SHA-512", "x")
    try:
        first = token(auth, other.get_client_first().encode(), 2_000)
        other.set_server_first(bytes(first.response.auth_bytes).decode())
        reply = token(auth, other.get_client_final().encode(), 2_000)
    finally:
        del CREDENTIALS[("mallory", "SCRAM-SHA-512")]
    assert reply.failed and "Cannot change principals" in reply.response.error_message
    auth = authenticator(reauth_ms=10_000)
    scram_login(auth, now=0)
    assert handshake(auth, "PLAIN", now=2_000).response.error_code == 0
    assert isinstance(token(auth, b"\x00bob\x00bob-secret", 2_000), Close)


def test_without_a_session_end_a_second_handshake_goes_to_its_handler():
    auth = authenticator()
    scram_login(auth)
    assert handshake(auth, "SCRAM-SHA-512", now=5_000) is PASS  # answered ILLEGAL_SASL_STATE there


def test_sasl_authenticate_v0_clients_cannot_reauthenticate():
    auth = authenticator(reauth_ms=10_000)
    handshake(auth, "PLAIN")
    token(auth, b"\x00bob\x00bob-secret", version=0)
    assert handshake(auth, "PLAIN", now=2_000) is PASS


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([HANDSHAKE, AUTHENTICATE, VERSIONS, METADATA]),
            st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "", "GSSAPI", "x" * 300]),
            st.binary(max_size=200)
            | st.sampled_from([b"n,,n=alice,r=abc", b"c=biws,r=abc,p=AAAA", b"\x00bob\x00bob-secret"]),
            st.integers(0, 2),
        ),
        max_size=8,
    )
)
def test_any_sequence_of_requests_gets_an_answer_never_an_exception(steps):
    auth = authenticator(reauth_ms=1000)
    now = 0
    for api, mechanism, data, version in steps:
        now += 400
        if api == HANDSHAKE:
            verdict = auth.receive(api, 1, SaslHandshakeRequest(mechanism=mechanism), now)
        elif api == AUTHENTICATE:
            verdict = auth.receive(api, version, SaslAuthenticateRequest(auth_bytes=data), now)
        else:
            verdict = auth.receive(api, 3, object(), now)
        assert verdict is PASS or isinstance(verdict, Reply | Close)
        if isinstance(verdict, Reply) and verdict.failed:
            assert auth.state is State.FAILED
        if verdict is PASS and api not in (VERSIONS,):
            assert auth.principal is not None  # nothing but ApiVersions passes unauthenticated
