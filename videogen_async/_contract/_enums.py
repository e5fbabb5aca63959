"""String-valued enums of the service's fields.

Every member *is* its string (``TaskStatus.SUCCEEDED == "succeeded"``): arguments accept
either. The enums are open: a value the service added after this SDK was released reads as a
member of its own (``TaskStatus("paused")``, equal to ``"paused"``, with ``.value`` and
``.name``), so that a model's field has one type, the enum, and code written against it type
checks; ``is_known`` tells such a member from the documented ones, which alone are listed
(``list(TaskStatus)``, ``values()``).
"""

from __future__ import annotations

import enum


class _StrEnum(str, enum.Enum):
    """A ``str`` enum whose ``str()`` is its value on every supported Python."""

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def _missing_(cls, value: object) -> _StrEnum | None:
        # A value this SDK does not know: a member made for it, never listed, never cached
        # (each read makes its own; they are equal and hash alike, as their strings do).
        if not isinstance(value, str):
            return None
        member = str.__new__(cls, value)
        member._name_, member._value_ = value.upper(), value
        return member

    def __reduce_ex__(self, protocol: object) -> tuple[type[_StrEnum], tuple[str]]:
        # By value on every Python (some pickle members by name, which a value the service
        # added since has none of).
        return type(self), (self._value_,)

    @property
    def is_known(self) -> bool:
        """Whether this is one of the documented values (not one the service added since)."""
        # By value: an unknown "SUCCEEDED" is named SUCCEEDED too, and is not the member.
        return self._value_ in type(self)._value2member_map_

    @classmethod
    def values(cls) -> tuple[str, ...]:
        """Return the documented values, in declaration order."""
        return tuple(member.value for member in cls)


class TaskStatus(_StrEnum):
    """State of a video task. ``succeeded``, ``failed`` and ``error`` are terminal."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ERROR = "error"


class ProjectStatus(_StrEnum):
    """State of a viral ad clone project."""

    DRAFT = "draft"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class ProjectStep(_StrEnum):
    """The step a project is at (``current_step``)."""

    PREPARING_MEDIA = "preparing_media"
    ANALYZING = "analyzing"
    GENERATING_SCRIPT = "generating_script"
    SCRIPT_READY = "script_ready"
    GENERATING_VIDEO = "generating_video"
    FAILED = "failed"


class ProjectMode(_StrEnum):
    """``auto`` creates one video batch when the script is ready; ``manual`` waits for you."""

    AUTO = "auto"
    MANUAL = "manual"


class Model(_StrEnum):
    """Model variant of a direct video task."""

    VIDEOMODEL_2_0 = "videomodel_2_0"
    VIDEOMODEL_2_0_FAST = "videomodel_2_0_fast"


class FunctionMode(_StrEnum):
    """How a direct video task uses its reference media."""

    FIRST_LAST_FRAMES = "first_last_frames"
    OMNI_REFERENCE = "omni_reference"


class Ratio(_StrEnum):
    """Frame ratio of a direct video task."""

    R21_9 = "21:9"
    R16_9 = "16:9"
    R4_3 = "4:3"
    R1_1 = "1:1"
    R3_4 = "3:4"
    R9_16 = "9:16"


class AspectRatio(_StrEnum):
    """Aspect ratio of a project's videos."""

    R9_16 = "9:16"
    R1_1 = "1:1"
    R16_9 = "16:9"


class SpeechLanguage(_StrEnum):
    """Language of generated speech in a project.

    ``SAME_AS_REFERENCE`` (the empty string) follows the spoken language of the reference video.
    """

    SAME_AS_REFERENCE = ""
    ENGLISH = "english"
    SPANISH = "spanish"
    PORTUGUESE = "portuguese"
    FRENCH = "french"
    GERMAN = "german"
    ARABIC = "arabic"
    CHINESE = "chinese"
    JAPANESE = "japanese"
    KOREAN = "korean"
    VIETNAMESE = "vietnamese"
    THAI = "thai"
    INDONESIAN = "indonesian"
    MALAY = "malay"
    FILIPINO = "filipino"
    HINDI = "hindi"


TERMINAL_TASK_STATUSES: frozenset[str] = frozenset(
    {TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.ERROR}
)
TERMINAL_PROJECT_STATUSES: frozenset[str] = frozenset(
    {ProjectStatus.SUCCEEDED, ProjectStatus.FAILED}
)
