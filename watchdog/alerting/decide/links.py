"""The links a notification carries, vetted where the notification is made.

Why here and not with the rendering: the decide stage fills each alert's dashboard link from the
config's template when it makes the notification (`watchdog.alerting.decide.notification`), and the
renderers vet every link they print again; both need the same two functions, and the decide
stage imports no renderer.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Dict, Optional

from watchdog.core.findings import JOB_LABEL, LEGACY_JOB_LABEL


def safe_url(url: Optional[str]) -> Optional[str]:
    """Only http(s) links without characters that could break out of a link syntax."""
    if not url or not re.match(r"^https?://[^\s<>|\[\]()`\"']+$", url):
        return None
    return url


def dashboard_link(template: Optional[str], labels: Dict[str, str], rule: str) -> Optional[str]:
    """Fill `{label}` placeholders (URL-encoded; unknown names empty) and vet the result."""
    if not template:
        return None

    class _Vals(dict):
        def __missing__(self, key: str) -> str:
            return ""

    vals = _Vals({k: urllib.parse.quote(str(v), safe="") for k, v in labels.items()})
    vals["rule"] = urllib.parse.quote(rule, safe="")
    # Templates written before the label rename say `{job}`: keep filling it.
    vals.setdefault(LEGACY_JOB_LABEL, vals.get(JOB_LABEL, ""))
    try:
        return safe_url(template.format_map(vals))
    except (ValueError, IndexError, AttributeError):
        return None
