"""Device pair scores, `hami.io/node-nvidia-score`.

`[{"uuid":"<id>","score":{"<other id>":<int>,...}},...]`: one object per GPU in
registration order, score keys sorted (Go map order), `{}` for a GPU without peers.
Decoding is plain Go JSON into `[]DevicePairScore` (a `null` element is the zero value).
"""

from collections.abc import Sequence
from types import MappingProxyType

from pyhami.model import DevicePairScore
from pyhami.protocol.arithmetic import INT64_MAX, INT64_MIN
from pyhami.protocol.errors import check_range
from pyhami.protocol.gojson import FieldNames, Reader, dumps

FIELD = "device pair scores"
_FIELDS = FieldNames("uuid", "score")


def decode_pair_scores(value: str) -> tuple[DevicePairScore, ...]:
    """HAMi `DecodePairScores`."""
    reader = Reader(FIELD, value)

    def score(where: str, item: object) -> int:
        return reader.go_int(where, item)

    def entry(where: str, item: object) -> DevicePairScore:
        fields = reader.fields(where, item, _FIELDS)
        return DevicePairScore(
            uuid=reader.string(f"{where}.uuid", fields.get("uuid")),
            scores=MappingProxyType(reader.mapping(f"{where}.score", fields.get("score"), score)),
        )

    return reader.parse(lambda doc: reader.array("scores", doc, entry)) or ()


def encode_pair_scores(scores: Sequence[DevicePairScore]) -> str:
    """The device plugin's writer: entries in the given order, each score map key-sorted."""
    for row in scores:
        for peer, number in row.scores.items():
            check_range(FIELD, f"score {row.uuid} -> {peer}", number, INT64_MIN, INT64_MAX)
    return dumps([{"uuid": row.uuid, "score": dict(sorted(row.scores.items()))} for row in scores])
