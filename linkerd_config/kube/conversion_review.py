"""apiextensions.k8s.io/v1 ConversionReview: the request a CRD's conversion webhook answers.

Plumbing only: which objects to convert to which ``apiVersion`` comes in, and the converted
objects (in the same order, same uids) or a failure go out. What converting means is a plain
function the caller registers (``Convert``). A failure makes the API server refuse the read
or write that needed the conversion, so a converter should not fail: this module turns a
converter's exception into a Failure result naming the object, never a 5xx.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import orjson

from linkerd_config.kube.resource import Json

Convert = Callable[[Json, str], Json]
"""(object, desired apiVersion) -> the object in that apiVersion."""


class BadConversionReview(ValueError):
    """The body is not a ConversionReview we can answer; the message says what is wrong."""


@dataclass(frozen=True)
class ConversionRequest:
    uid: str
    desired_api_version: str
    objects: list[Json]


def parse_conversion_review(body: bytes) -> ConversionRequest:
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadConversionReview(f"body is not JSON: {exc}") from None
    if not isinstance(review, dict) or review.get("kind") != "ConversionReview":
        raise BadConversionReview("body is not a ConversionReview")
    if review.get("apiVersion") != "apiextensions.k8s.io/v1":
        raise BadConversionReview(
            f"expected apiVersion apiextensions.k8s.io/v1, got {review.get('apiVersion')!r}"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadConversionReview("ConversionReview has no request object")
    uid, desired, objects = (
        request.get("uid"),
        request.get("desiredAPIVersion"),
        request.get("objects"),
    )
    if not isinstance(uid, str) or not uid:
        raise BadConversionReview("request.uid must be a non-empty string")
    if not isinstance(desired, str) or "/" not in desired:
        raise BadConversionReview("request.desiredAPIVersion must be group/version")
    if not isinstance(objects, list) or not all(isinstance(o, dict) for o in objects):
        raise BadConversionReview("request.objects must be a list of objects")
    return ConversionRequest(uid, desired, objects)


def answer_conversion(request: ConversionRequest, convert: Convert) -> Json:
    """The ConversionReview response: every object converted, or a Failure naming the
    first that could not be."""
    converted: list[Json] = []
    result: Json = {"status": "Success"}
    for obj in request.objects:
        try:
            out = convert(obj, request.desired_api_version)
        except Exception as exc:  # a converter bug must not become a 500 for the API server
            metadata = obj.get("metadata")
            name = metadata.get("name") if isinstance(metadata, dict) else None
            result = {
                "status": "Failure",
                "message": f"{obj.get('kind', 'object')} {name}: cannot convert to "
                f"{request.desired_api_version}: {exc}",
            }
            converted = []
            break
        out["apiVersion"] = request.desired_api_version
        converted.append(out)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": {"uid": request.uid, "convertedObjects": converted, "result": result},
    }
