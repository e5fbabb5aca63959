"""The service, stated once: endpoints, request fields and rules, response shapes.

The table to hold against the service interface document. Derived from it: the request checks
(``_contract._validation``, also run by the sandbox), the OpenAPI document
(``testing._openapi``, ``docs/openapi.json``), the sandbox's answers (``testing._render``), the
response models (a test holds them to the shapes) and the reference prices (:class:`Pricing`:
the sandbox's charges and the CLI's estimate; the service publishes only the script's price).

Adding an optional request field is one line in a ``Body`` below (and its test).

Field types (``Field.type``):

=============  ===============================================================================
``text``       a string that is not blank once trimmed
``string``     any string
``integer``    an integer (an integral ``4.0`` counts as 4), within ``minimum``/``maximum``
``number``     a number (credits: never negative)
``url``        a public ``http``/``https`` URL without white space
``urls``       a list of ``url``, ``min_items`` to ``max_items`` long
``enum``       one of the values of ``choices``
``resolution`` a positive integer or a non-blank string (720, 1080, "1080p", ...)
``id``         an identifier: one path segment (see ``_validation.check_id``)
``datetime``   an ISO 8601 date-time
``ids``        a list of ``id``
``<Shape>``    an object of that shape; ``[<Shape>]`` a list of them
=============  ===============================================================================
"""

from __future__ import annotations

import functools
import types
from collections.abc import Mapping
from typing import Any, TypeAlias

import attrs

from . import _enums as enums

_Choices: TypeAlias = "type[enums._StrEnum]"


@attrs.frozen
class Field:
    """One field of a request body or of a response shape.

    Attributes:
        name: The JSON name.
        type: One of the types in the module docstring.
        required: Request: must be present. Response: always present in the answer.
        default: The service's default when omitted (``None``: none documented).
        choices: The enum of an ``enum`` field.
        minimum: Least value of an ``integer``.
        maximum: Greatest value of an ``integer``.
        min_items: Fewest items of a list.
        max_items: Most items of a list (``None``: not documented).
        nullable: Response: may be ``null``. (In a request ``null`` counts as omitted.)
        unit: The unit named in error messages (``seconds``).
        extra: Response: sent by the sandbox but not read by the SDK's models.
        doc: One line for the OpenAPI document.
    """

    name: str
    type: str
    required: bool = False
    default: Any = None
    choices: _Choices | None = None
    minimum: int | None = None
    maximum: int | None = None
    min_items: int = 0
    max_items: int | None = None
    nullable: bool = False
    unit: str = ""
    extra: bool = False
    doc: str = ""


@attrs.frozen
class MaxItemsWhen:
    """``field`` holds at most ``max_items`` when ``when`` is ``equals``."""

    field: str
    max_items: int
    when: str
    equals: str
    noun: str


@attrs.frozen
class NeedsOneOfWhen:
    """A non-empty ``field`` needs one of ``others`` non-empty when ``when`` is ``equals``."""

    field: str
    others: tuple[str, ...]
    when: str
    equals: str
    reason: str


Rule = MaxItemsWhen | NeedsOneOfWhen


@attrs.frozen
class Body:
    """A request body: its fields and the rules that span fields."""

    name: str
    fields: tuple[Field, ...]
    rules: tuple[Rule, ...] = ()
    doc: str = ""

    names: Mapping[str, Field] = attrs.field(init=False, eq=False, repr=False)
    """The documented fields by name (made once: every body checked reads them)."""

    @names.default
    def _names(self) -> Mapping[str, Field]:
        return {f.name: f for f in self.fields}

    def field(self, name: str) -> Field:
        """Return the field called ``name``."""
        return self.names[name]


@attrs.frozen
class Shape:
    """A response object (the ``data`` of an envelope, or an object inside one)."""

    name: str
    fields: tuple[Field, ...]

    @property
    def names(self) -> tuple[str, ...]:
        """Field names in the order the sandbox writes them."""
        return tuple(f.name for f in self.fields)

    @property
    def model_names(self) -> tuple[str, ...]:
        """Field names the SDK's model reads (every field but the ``extra`` ones)."""
        return tuple(f.name for f in self.fields if not f.extra)


@attrs.frozen
class Endpoint:
    """One operation of the service."""

    operation_id: str
    method: str
    path: str
    summary: str
    tag: str
    response: str
    ok: str
    body: Body | None = None
    body_required: bool = True
    path_params: tuple[str, ...] = ()
    query_params: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


# -- Limits (named, as the interface document's "Limits" table) ------------------------------------

DURATION_MIN = 4
DURATION_MAX = 15
MAX_IMAGE_URLS = 9
MAX_AUDIO_URLS = 3
MAX_VIDEO_URLS = 3
FIRST_LAST_FRAMES_MAX_IMAGES = 2
OUT_NUMBER_MIN = 1
OUT_NUMBER_MAX = 4

_F = Field
#: A field a request must hold, or one every answer holds (the common case of a shape).
_R = functools.partial(Field, required=True)
_OMNI = enums.FunctionMode.OMNI_REFERENCE.value

# -- Request bodies --------------------------------------------------------------------------------

# fmt: off
TASK_REQUEST = Body("CreateTaskRequest", (
    _F("model", "enum", default="videomodel_2_0", choices=enums.Model),
    _R("prompt", "text", doc="Text prompt."),
    _F("function_mode", "enum", default=_OMNI, choices=enums.FunctionMode),
    _F("ratio", "enum", default="16:9", choices=enums.Ratio),
    _F("duration", "integer", default=5, minimum=DURATION_MIN, maximum=DURATION_MAX,
       unit="seconds"),
    _F("image_urls", "urls", max_items=MAX_IMAGE_URLS, doc="Reference images."),
    _F("audio_urls", "urls", max_items=MAX_AUDIO_URLS, doc="Reference audio."),
    _F("video_urls", "urls", max_items=MAX_VIDEO_URLS, doc="Reference videos."),
), rules=(
    MaxItemsWhen("image_urls", FIRST_LAST_FRAMES_MAX_IMAGES, "function_mode",
                 enums.FunctionMode.FIRST_LAST_FRAMES.value, "images"),
    NeedsOneOfWhen("audio_urls", ("image_urls", "video_urls"), "function_mode", _OMNI,
                   "audio-only input is rejected"),
))

PROJECT_REQUEST = Body("CreateProjectRequest", (
    _R("reference_video_url", "url", doc="The reference ad video."),
    _R("product_image_urls", "urls", min_items=1, doc="Product images."),
    _F("avatar_image_url", "url", doc="A person, avatar or spokesperson image."),
    _F("prompt", "string", doc="Selling points, style, restrictions, language."),
    _F("aspect_ratio", "enum", default="9:16", choices=enums.AspectRatio),
    _F("speech_language_option", "enum", default="", choices=enums.SpeechLanguage,
       doc="Empty string follows the reference video's spoken language."),
    _F("duration", "integer", default=15, minimum=1, unit="seconds"),
    _F("resolution", "resolution", default=720),
    _F("out_number", "integer", default=1, minimum=OUT_NUMBER_MIN, maximum=OUT_NUMBER_MAX),
    _F("mode", "enum", default="auto", choices=enums.ProjectMode),
))

VIDEOS_REQUEST = Body("CreateVideosRequest", (
    _F("script", "text", doc="Script of this batch only; never overwrites the project's."),
    _F("out_number", "integer", minimum=OUT_NUMBER_MIN, maximum=OUT_NUMBER_MAX,
       doc="Default: the project's."),
    _F("resolution", "resolution", doc="Default: the project's."),
    _F("aspect_ratio", "enum", choices=enums.AspectRatio, doc="Default: the project's."),
))

# -- Response shapes -------------------------------------------------------------------------------

_TASK_FIELDS = (
    _R("task_id", "id"),
    _R("status", "enum", choices=enums.TaskStatus),
    _R("model", "string", doc="The model value used to create the task."),
    _R("created_at", "datetime", doc="When the task was created."),
    _R("updated_at", "datetime", doc="When the task last changed."),
    _R("credits_cost", "number", minimum=0,
       doc="Credits charged; 0 once a task failed and was refunded."),
    _R("result", "TaskResult", nullable=True),
)

SHAPES: dict[str, Shape] = {s.name: s for s in (
    Shape("CreditBalance", (
        _R("api_available_credits", "number"),
        _R("api_total_credits", "number"),
    )),
    Shape("CreatedTask", (
        _R("task_id", "id"),
        _R("status", "enum", choices=enums.TaskStatus),
        _R("created_at", "datetime", doc="When the task was created."),
        _R("credits_cost", "number", minimum=0,
           doc="Credits charged for the task."),
    )),
    Shape("TaskResult", (
        _R("video_url", "url", nullable=True,
           doc="The generated video, once the task has succeeded."),
        _R("error_message", "string", nullable=True),
        _R("finished_at", "datetime", doc="When the task finished."),
        _F("status", "enum", choices=enums.TaskStatus, extra=True,
           doc="Shown by one example of the service; not to be relied on."),
    )),
    Shape("Task", _TASK_FIELDS),
    Shape("ProjectTask", (
        *_TASK_FIELDS,
        _R("batch", "integer", minimum=1, extra=True,
           doc="1 for the first batch."),
        _F("aspect_ratio", "enum", choices=enums.AspectRatio, extra=True,
           doc="Aspect ratio of the batch."),
        _F("resolution", "resolution", extra=True, doc="Of the batch."),
    )),
    Shape("Billing", (
        _R("script_credits_cost", "number", minimum=0,
           doc="Charged for script generation."),
        _R("video_credits_cost", "number", minimum=0,
           doc="Charged for the non-failed video tasks."),
        _R("total_credits_cost", "number", minimum=0,
           doc="Script plus video."),
    )),
    Shape("CreatedProject", (
        _R("project_id", "id"),
        _R("status", "enum", choices=enums.ProjectStatus, doc="draft at creation."),
        _R("current_step", "enum", choices=enums.ProjectStep,
           doc="preparing_media at creation."),
        _R("mode", "enum", choices=enums.ProjectMode, doc="auto or manual."),
        _R("credits_cost", "number", minimum=0,
           doc="Charged for script generation (10)."),
        _R("created_at", "datetime", nullable=True),
    )),
    Shape("Project", (
        _R("project_id", "id"),
        _R("status", "enum", choices=enums.ProjectStatus, doc="Project status."),
        _R("current_step", "enum", choices=enums.ProjectStep, doc="Project step."),
        _R("mode", "enum", choices=enums.ProjectMode, doc="auto or manual."),
        _R("error_message", "string", nullable=True),
        _R("view_script", "string", nullable=True,
           doc="The script, one line per time range; null until generated."),
        _R("billing", "Billing"),
        _R("task_ids", "ids"),
        _R("tasks", "[ProjectTask]"),
        _R("created_at", "datetime", doc="When the project was created."),
        _R("updated_at", "datetime", doc="When the project last changed."),
    )),
    Shape("VideoBatch", (
        _R("project_id", "id"),
        _R("project_status", "enum", choices=enums.ProjectStatus,
           doc="running after the call."),
        _R("current_step", "enum", choices=enums.ProjectStep,
           doc="generating_video after the call."),
        _R("task_ids", "ids", min_items=1),
    )),
)}

# -- Endpoints -------------------------------------------------------------------------------------

ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("createVideoTask", "POST", "/v1/video/videomodel-2",
             "Create a direct video generation task", "tasks",
             "CreatedTask", "The task was created and charged.",
             body=TASK_REQUEST, errors=("400", "409", "413")),
    Endpoint("getTask", "GET", "/v1/tasks",
             "Query the status and result of a video task", "tasks",
             "Task", "The task; result is null while it is in progress.",
             query_params=("task_id",), errors=("400", "404")),
    Endpoint("getCredits", "GET", "/v1/credits", "Query the API credit balance", "credits",
             "CreditBalance", "The balance.", errors=("400",)),
    Endpoint("createProject", "POST", "/v1/video/viral-ads-clone",
             "Create a viral ad clone project", "projects",
             "CreatedProject", "The project was created and 10 credits charged.",
             body=PROJECT_REQUEST, errors=("400", "409", "413")),
    Endpoint("getProject", "GET", "/v1/video/viral-ads-clone/{project_id}",
             "Get a project with its script, tasks and billing", "projects",
             "Project", "The project.", path_params=("project_id",), errors=("400", "404")),
    Endpoint("createProjectVideos", "POST", "/v1/video/viral-ads-clone/{project_id}/videos",
             "Create a new batch of video tasks from the project's script", "projects",
             "VideoBatch", "The batch was created and charged.",
             body=VIDEOS_REQUEST, body_required=False, path_params=("project_id",),
             errors=("400", "404", "409", "413")),
)
# fmt: on


# -- Reference prices ------------------------------------------------------------------------------


def _frozen_map(value: Mapping[Any, Any]) -> Mapping[str, float]:
    return types.MappingProxyType({str(k): float(v) for k, v in dict(value).items()})


@attrs.frozen
class Pricing:
    """Prices in API credits. The service publishes one: 10 credits for a project's script.

    The defaults are the reference prices: what the sandbox charges, and what the command
    line's spending estimate assumes for the videos, whose price is not published.

    Attributes:
        script_credits: A project's script, charged at its creation.
        per_second: Credits per second of a direct task's video, by model.
        default_per_second: The rate of a model missing from ``per_second``.
        project_video_per_second: Credits per second of a project's video (its ``duration``).
        resolution_factors: A project video's price multiplier by resolution (``"1080"``:
            1.5); another number of lines costs 1x.
    """

    script_credits: float = 10.0
    per_second: Mapping[str, float] = attrs.field(
        default={"videomodel_2_0": 2.0, "videomodel_2_0_fast": 1.0},
        converter=_frozen_map,
        hash=False,
    )
    default_per_second: float = 2.0
    project_video_per_second: float = 2.0
    resolution_factors: Mapping[str, float] = attrs.field(
        default={"720": 1.0, "1080": 1.5, "1440": 2.0, "2160": 3.0},
        converter=_frozen_map,
        hash=False,
    )

    def task_cost(self, model: str | None, duration: int | None) -> float:
        """The price of a direct task (the service's default model and duration for ``None``)."""
        rate = self.per_second.get(model or TASK_REQUEST.field("model").default)
        return round(
            (self.default_per_second if rate is None else rate)
            * (duration or TASK_REQUEST.field("duration").default),
            2,
        )

    def resolution_factor(self, resolution: int | str | None) -> float | None:
        """A project video's price factor; ``None`` for a resolution that is not a number."""
        if resolution is None:
            resolution = PROJECT_REQUEST.field("resolution").default
        text = str(resolution).strip().lower().removesuffix("p")
        return self.resolution_factors.get(text, 1.0 if text.isdigit() else None)

    def project_video_cost(self, duration: int | None, resolution: int | str | None) -> float:
        """The price of one project video (1x for a resolution that is not a number)."""
        return round(
            self.project_video_per_second
            * (duration or PROJECT_REQUEST.field("duration").default)
            * (self.resolution_factor(resolution) or 1.0),
            2,
        )

    def project_cost(self, request: Mapping[str, Any]) -> float | None:
        """The price of a new project of ``request`` (its body); ``None`` when not known.

        In ``auto`` mode (the default) the service makes the project's ``out_number`` videos
        after its script and charges them too: script + out_number x video price. In
        ``manual`` mode the project's creation charges the script only (its videos are asked
        for, and priced, later). A resolution that is not a number has no known price.
        """
        if request.get("mode") == "manual":
            return self.script_credits
        resolution = request.get("resolution")
        if self.resolution_factor(resolution) is None:
            return None
        count: int = request.get("out_number") or PROJECT_REQUEST.field("out_number").default
        return self.script_credits + count * self.project_video_cost(
            request.get("duration"), resolution
        )


REFERENCE_PRICES = Pricing()
"""The reference prices (the defaults of :class:`Pricing`)."""
