"""Principals from client certificates: RFC 2253 subjects and ssl.principal.mapping.rules, with the
cases of Kafka's SslPrincipalMapperTest."""

from __future__ import annotations

import pytest

from onceflow.broker.security.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    NoMatchingRule,
    PrincipalMapper,
    distinguished_name,
)


def test_principal_parse_and_text():
    assert KafkaPrincipal.parse("User:alice") == KafkaPrincipal("User", "alice")
    assert str(KafkaPrincipal.parse("User:CN=a,O=b")) == "User:CN=a,O=b"
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    for bad in ("alice", ":alice", "User:"):
        with pytest.raises(ValueError):
            KafkaPrincipal.parse(bad)


def test_distinguished_name_is_most_specific_first_with_java_keywords_and_escapes():
    cert = {
        "subject": (
            (("countryName", "US"),),
            (("organizationName", "Acme, Inc"),),
            (("organizationalUnitName", "eng"),),
            (("commonName", "alice"),),
        )
    }
    assert distinguished_name(cert) == "CN=alice,OU=eng,O=Acme\\, Inc,C=US"
    email = {"subject": ((("emailAddress", "a@b.c"),), (("commonName", "x"),))}
    # Java prints types it has no keyword for as OID=#<DER>: an IA5String of "a@b.c".
    assert distinguished_name(email) == "CN=x,1.2.840.113549.1.9.1=#16056140622e63"


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_invalid_rules_are_refused(rules):
    with pytest.raises(ValueError):
        PrincipalMapper(rules)


def test_rules_apply_in_order_with_case_changes():
    mapper = PrincipalMapper(
        ", ".join(
            [
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
                "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
                "DEFAULT",
            ]
        )
    )
    assert mapper.name_for("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name_for("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name_for("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name_for("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name_for("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


def test_escaped_comma_in_a_rule():
    mapper = PrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name_for("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_no_matching_rule_refuses_and_default_keeps_the_name():
    mapper = PrincipalMapper("RULE:^CN=(.*?),O=onceflow$/$1/")
    assert mapper.name_for("CN=alice,O=onceflow") == "alice"
    with pytest.raises(NoMatchingRule):
        mapper.name_for("CN=mallory,O=elsewhere")
    assert PrincipalMapper(None).name_for("CN=x") == "CN=x"


def test_back_reference_beyond_the_groups_stays_literal():
    assert PrincipalMapper("RULE:^CN=(.*)$/$1-$2/").name_for("CN=a") == "a-$2"
