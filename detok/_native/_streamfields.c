/* StreamFields and TypedFields: see _streamfields.h. */
#include "_streamfields.h"
#include <stddef.h>
#include <structmember.h>

#define FIELD(type, name, field) {name, T_OBJECT_EX, offsetof(type, field), 0, NULL}

static PyMemberDef StreamFields_members[] = {
    FIELD(StreamFields, "_chunks", chunks),         /* list[str]: text received, not taken */
    FIELD(StreamFields, "_logprobs", logprobs),     /* list[TokenLogprobs]: entries received, not taken */
    FIELD(StreamFields, "_received", received),     /* int: the char offset the next text should have */
    FIELD(StreamFields, "_next_token", next_token), /* int: the token index the next entries should have */
    FIELD(StreamFields, "_tokens", tokens),         /* int | None: output tokens so far */
    FIELD(StreamFields, "finish", finish),          /* Finish | None */
    FIELD(StreamFields, "_waiter", waiter),         /* the consumer's future, or None */
    FIELD(StreamFields, "_typed", typed),           /* TypedState | None */
    FIELD(StreamFields, "_pusher", pusher),         /* the pusher (push_to), or None */
    FIELD(StreamFields, "_push_error", push_error), /* what a push raised, for the consumer, or None */
    {"_push_queued", T_BOOL, offsetof(StreamFields, push_queued), 0, NULL},
    {NULL},
};

static PyMemberDef TypedFields_members[] = {
    FIELD(TypedFields, "new_reasoning", new_reasoning), /* list[str]: received, not taken */
    FIELD(TypedFields, "new_calls", new_calls),         /* list[ToolCallDelta]: received, not taken */
    FIELD(TypedFields, "reasoning", reasoning),         /* int: reasoning chars received */
    FIELD(TypedFields, "content", content),             /* int: content chars received */
    FIELD(TypedFields, "args", args),                   /* dict[int, int]: call index -> argument chars */
    FIELD(TypedFields, "last_call", last_call),         /* int: the highest call index seen */
    {NULL},
};

static int StreamFields_traverse(StreamFields *f, visitproc visit, void *arg) {
    Py_VISIT(f->chunks);
    Py_VISIT(f->logprobs);
    Py_VISIT(f->received);
    Py_VISIT(f->next_token);
    Py_VISIT(f->tokens);
    Py_VISIT(f->finish);
    Py_VISIT(f->waiter);
    Py_VISIT(f->typed);
    Py_VISIT(f->pusher);
    Py_VISIT(f->push_error);
    return 0;
}

static int StreamFields_clear(StreamFields *f) {
    Py_CLEAR(f->chunks);
    Py_CLEAR(f->logprobs);
    Py_CLEAR(f->received);
    Py_CLEAR(f->next_token);
    Py_CLEAR(f->tokens);
    Py_CLEAR(f->finish);
    Py_CLEAR(f->waiter);
    Py_CLEAR(f->typed);
    Py_CLEAR(f->pusher);
    Py_CLEAR(f->push_error);
    return 0;
}

static void StreamFields_dealloc(StreamFields *f) { /* (a Python subclass's dealloc releases its type) */
    PyObject_GC_UnTrack(f);
    StreamFields_clear(f);
    Py_TYPE(f)->tp_free((PyObject *)f);
}

static int TypedFields_traverse(TypedFields *f, visitproc visit, void *arg) {
    Py_VISIT(f->new_reasoning);
    Py_VISIT(f->new_calls);
    Py_VISIT(f->reasoning);
    Py_VISIT(f->content);
    Py_VISIT(f->args);
    Py_VISIT(f->last_call);
    return 0;
}

static int TypedFields_clear(TypedFields *f) {
    Py_CLEAR(f->new_reasoning);
    Py_CLEAR(f->new_calls);
    Py_CLEAR(f->reasoning);
    Py_CLEAR(f->content);
    Py_CLEAR(f->args);
    Py_CLEAR(f->last_call);
    return 0;
}

static void TypedFields_dealloc(TypedFields *f) {
    PyObject_GC_UnTrack(f);
    TypedFields_clear(f);
    Py_TYPE(f)->tp_free((PyObject *)f);
}

PyTypeObject detok_StreamFieldsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "detok._native._chunkpush.StreamFields",
    .tp_basicsize = sizeof(StreamFields),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The fields of a RequestStream that push_rows reads and writes (see _streamfields.h).",
    .tp_new = PyType_GenericNew,
    .tp_alloc = PyType_GenericAlloc,
    .tp_free = PyObject_GC_Del,
    .tp_traverse = (traverseproc)StreamFields_traverse,
    .tp_clear = (inquiry)StreamFields_clear,
    .tp_dealloc = (destructor)StreamFields_dealloc,
    .tp_members = StreamFields_members,
};

PyTypeObject detok_TypedFieldsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "detok._native._chunkpush.TypedFields",
    .tp_basicsize = sizeof(TypedFields),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The fields of a TypedState that push_rows reads and writes (see _streamfields.h).",
    .tp_new = PyType_GenericNew,
    .tp_alloc = PyType_GenericAlloc,
    .tp_free = PyObject_GC_Del,
    .tp_traverse = (traverseproc)TypedFields_traverse,
    .tp_clear = (inquiry)TypedFields_clear,
    .tp_dealloc = (destructor)TypedFields_dealloc,
    .tp_members = TypedFields_members,
};

int detok_streamfields_ready(void) {
    return PyType_Ready(&detok_StreamFieldsType) < 0 || PyType_Ready(&detok_TypedFieldsType) < 0 ? -1 : 0;
}
