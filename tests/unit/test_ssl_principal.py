"""``ssl.principal.mapping.rules`` (Kafka's KIP-371 syntax and results)."""

from __future__ import annotations

import pytest

from coordinator.security.ssl_principal import MappingRuleError, NoMatchingRule, SslPrincipalMapper

DUKE = "CN=Duke,OU=ServiceUsers,O=Org,C=US"


@pytest.mark.parametrize(
    ("rules", "subject", "name"),
    [
        ("DEFAULT", DUKE, DUKE),
        (None, DUKE, DUKE),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", DUKE, "Duke"),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L", DUKE, "duke"),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/U", DUKE, "DUKE"),
        # Commas inside a rule; the first rule that applies wins; DEFAULT as the fallback.
        (
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, "
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L, DEFAULT",
            "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Palo Alto,ST=CA,C=US",
            "duke@javasoft",
        ),
        (
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, "
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L, DEFAULT",
            "CN=Duke,OU=JavaSoft,O=Sun Microsystems,C=US",
            "duke",
        ),
        ("RULE:^CN=(.*?),OU=xyz.*$/$1/, DEFAULT", DUKE, DUKE),
        # An escaped slash inside the replacement; a literal '$' (\$).
        ("RULE:^CN=(.*?),OU=(.*?),.*$/$1\\/$2/", DUKE, "Duke/ServiceUsers"),
        ("RULE:^CN=(.*?),.*$/\\$$1/", DUKE, "$Duke"),
        # A group number beyond the pattern's groups stays literal (Kafka's reading).
        ("RULE:^CN=(.*?),.*$/$4/", DUKE, "$4"),
        ("RULE:^CN=(.*?),.*$/$12/", DUKE, "Duke2"),
        # Empty rules are ignored.
        (" , RULE:^CN=(.*?),.*$/$1/ , ", DUKE, "Duke"),
    ],
)
def test_rules_map_subjects_as_kafka_does(rules: str | None, subject: str, name: str) -> None:
    assert SslPrincipalMapper(rules).name(subject) == name


def test_no_matching_rule_refuses() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=Clients,.*$/$1/")
    with pytest.raises(NoMatchingRule, match="CN=Duke"):
        mapper.name(DUKE)


@pytest.mark.parametrize(
    "rules",
    [
        "RULE:^CN=(.*)$/$1",  # no closing slash
        "RULE:^CN=(.*)$/$1/X",  # an unknown flag
        "RULES:^CN=(.*)$/$1/",
        "DEFAULT junk",
        "RULE:^CN=(.*$/$1/",  # a regular expression that does not compile
    ],
)
def test_bad_rules_are_refused(rules: str) -> None:
    with pytest.raises(MappingRuleError, match="Invalid rule"):
        SslPrincipalMapper(rules)
