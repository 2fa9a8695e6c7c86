"""Node device register in either form: JSON (v2.10, NVIDIA) or the legacy colon form.

`decode_node_devices` tells them apart: a value that starts with `[` after blanks, or is
`null`, is JSON; anything else is the colon form. A colon-form
device id starting with `[` would be misread, so vendors whose form is fixed call
`decode_node_devices_json` or `decode_node_devices_legacy` directly.
"""

from pyhami.model import DeviceInfo
from pyhami.protocol.goparse import trim_space
from pyhami.protocol.register_json import decode_node_devices_json
from pyhami.protocol.register_legacy import decode_node_devices_legacy


def decode_node_devices(value: str) -> tuple[DeviceInfo, ...]:
    """Either register form to devices; raises ProtocolError with the form's own message."""
    text = trim_space(value)
    if text.startswith("[") or text == "null":
        return decode_node_devices_json(value)
    return decode_node_devices_legacy(value)
