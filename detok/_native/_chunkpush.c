/* A text-only streamed chunk written by the receiving loop in one C call (detok.streaming.chunk_push).
 *
 * TextPusher(fallback, flow, cycle, write, timer_text, prefix, suffix, take=...) is the pusher of a
 * one-choice streamed response without logprobs or per-chunk usage: called with the RequestStream
 * whose deltas wait, it does what ChunkPusher's text-only branch does in Python -
 *   the client not there or not reading (uvicorn's flow.write_paused, cycle.disconnected): False;
 *   waiting text and nothing else (`take(stream)`: RequestStream.take_text, the stream's own rule,
 *   given at construction, gives a str): tick
 *   the clock (timer_text()), write the framed chunk (write(b"%x\r\n" + prefix + JSON(text) + suffix
 *   + b"\r\n")), True;
 *   anything else (take gives None): fallback(stream), the Python pusher, unchanged -
 * without the Python calls, the list and the joins of rendering and framing.
 *
 * JSON(text) is msgspec.json.encode(text): `"` and `\` escaped, controls below 0x20 as \b \t \n \f \r
 * or \u00xx, everything else its UTF-8 as it is (tests/frontend/test_chunkpush_c.py checks every
 * code point). A taken text that has no UTF-8 (a lone surrogate) raises UnicodeEncodeError, as the
 * Python pusher's encoder does.
 *
 * With `mid` and `items_suffix` (chat items mode: a chat response whose logprobs its workers render,
 * detok.worker.chat_entries) `take` is RequestStream.take_items: (text, items or None), text
 * and the rendered entries with nothing else waiting; the chunk is prefix + JSON(text), then, with
 * items, mid + the items joined with commas + items_suffix (`{"content":[...]}` and the chunk's end),
 * without, suffix (`"logprobs":null`) - ChunkPusher's bytes for that delta.
 *
 * With typed=True (a parsed chat choice's pusher) the receiver's pass (`push_rows`,
 * _directrows.c) writes its reasoning rows after `reasoning` (the delta's reasoning field; None:
 * not shown) and its content rows as text; called itself, take_text gives None for typed output and
 * the fallback (ChunkPusher, which declines it) is called, as before.
 *
 * frame_text(prefix, text, suffix) -> bytes: the framed chunk alone (for the tests). */
#include "_textpusher.h"
#include <stddef.h>

/* per byte: 0 as it is; 1 a two-character escape; 2 a \u00xx escape */
static unsigned char ESC[256];
static const char HEX[] = "0123456789abcdef";

static void init_escapes(void) {
    for (int c = 0; c < 0x20; c++) ESC[c] = 2;
    ESC['\b'] = ESC['\t'] = ESC['\n'] = ESC['\f'] = ESC['\r'] = 1;
    ESC['"'] = ESC['\\'] = 1;
}

static inline char short_escape(unsigned char c) {
    switch (c) {
    case '\b': return 'b';
    case '\t': return 't';
    case '\n': return 'n';
    case '\f': return 'f';
    case '\r': return 'r';
    default: return (char)c; /* '"' and '\\' */
    }
}

/* The framed chunk of `text` (UTF-8 `u`, `n` bytes) followed by `suffix`, or, with `items` (a list
 * of bytes, not empty), by `mid`, the items joined with commas and `suffix`; NULL with an
 * exception set. */
static PyObject *frame_with(const char *prefix, Py_ssize_t np, const char *u, Py_ssize_t n, PyObject *mid,
                            PyObject *items, const char *suffix, Py_ssize_t ns) {
    Py_ssize_t extra = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char e = ESC[(unsigned char)u[i]];
        extra += e == 0 ? 0 : e == 1 ? 1 : 5;
    }
    Py_ssize_t joined = 0, k = items == NULL ? 0 : PyList_GET_SIZE(items);
    if (items != NULL) {
        joined = PyBytes_GET_SIZE(mid) + k - 1;
        for (Py_ssize_t i = 0; i < k; i++) {
            PyObject *item = PyList_GET_ITEM(items, i);
            if (!PyBytes_CheckExact(item)) {
                PyErr_SetString(PyExc_TypeError, "a chat logprobs item must be bytes");
                return NULL;
            }
            joined += PyBytes_GET_SIZE(item);
        }
    }
    Py_ssize_t body = np + 2 + n + extra + joined + ns; /* the chunk's data: prefix, the quoted text, items, suffix */
    char size[20];
    int nsize = 0;
    for (Py_ssize_t v = body; v > 0 || nsize == 0; v >>= 4) size[nsize++] = HEX[v & 15];
    PyObject *out = PyBytes_FromStringAndSize(NULL, nsize + 2 + body + 2);
    if (out == NULL) return NULL;
    char *p = PyBytes_AS_STRING(out);
    while (nsize > 0) *p++ = size[--nsize];
    *p++ = '\r';
    *p++ = '\n';
    memcpy(p, prefix, np);
    p += np;
    *p++ = '"';
    if (extra == 0) {
        memcpy(p, u, n);
        p += n;
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)u[i], e = ESC[c];
            if (e == 0) {
                *p++ = (char)c;
            } else if (e == 1) {
                *p++ = '\\';
                *p++ = short_escape(c);
            } else {
                *p++ = '\\';
                *p++ = 'u';
                *p++ = '0';
                *p++ = '0';
                *p++ = HEX[c >> 4];
                *p++ = HEX[c & 15];
            }
        }
    }
    *p++ = '"';
    if (items != NULL) {
        memcpy(p, PyBytes_AS_STRING(mid), PyBytes_GET_SIZE(mid));
        p += PyBytes_GET_SIZE(mid);
        for (Py_ssize_t i = 0; i < k; i++) {
            PyObject *item = PyList_GET_ITEM(items, i);
            if (i > 0) *p++ = ',';
            memcpy(p, PyBytes_AS_STRING(item), PyBytes_GET_SIZE(item));
            p += PyBytes_GET_SIZE(item);
        }
    }
    memcpy(p, suffix, ns);
    p += ns;
    *p++ = '\r';
    *p++ = '\n';
    return out;
}

static PyObject *frame(const char *prefix, Py_ssize_t np, const char *u, Py_ssize_t n, const char *suffix, Py_ssize_t ns) {
    return frame_with(prefix, np, u, n, NULL, NULL, suffix, ns);
}

static PyObject *frame_text(PyObject *self, PyObject *args) {
    const char *prefix, *suffix;
    Py_ssize_t np, ns, n;
    PyObject *text;
    if (!PyArg_ParseTuple(args, "y#Uy#", &prefix, &np, &text, &suffix, &ns)) return NULL;
    const char *u = PyUnicode_AsUTF8AndSize(text, &n);
    if (u == NULL) return NULL;
    return frame(prefix, np, u, n, suffix, ns);
}

static PyObject *S_write_paused, *S_disconnected;

static int TextPusher_traverse(TextPusher *t, visitproc visit, void *arg) {
    Py_VISIT(t->fallback);
    Py_VISIT(t->take);
    Py_VISIT(t->flow);
    Py_VISIT(t->cycle);
    Py_VISIT(t->write);
    Py_VISIT(t->timer_text);
    Py_VISIT(t->sent_args);
    return 0;
}

static int TextPusher_clear(TextPusher *t) {
    Py_CLEAR(t->fallback);
    Py_CLEAR(t->take);
    Py_CLEAR(t->flow);
    Py_CLEAR(t->cycle);
    Py_CLEAR(t->write);
    Py_CLEAR(t->timer_text);
    Py_CLEAR(t->prefix);
    Py_CLEAR(t->suffix);
    Py_CLEAR(t->mid);
    Py_CLEAR(t->items_suffix);
    Py_CLEAR(t->reasoning);
    Py_CLEAR(t->sent_args);
    Py_CLEAR(t->calls_prefix);
    return 0;
}

static void TextPusher_dealloc(TextPusher *t) {
    PyObject_GC_UnTrack(t);
    TextPusher_clear(t);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

/* 1 if obj.name is true, 0 if not, -1 on an error */
static int attr_true(PyObject *obj, PyObject *name) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) return -1;
    int r = v == Py_False ? 0 : v == Py_True ? 1 : PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

static PyObject *call_fallback(TextPusher *t, PyObject *stream) {
    return PyObject_CallOneArg(t->fallback, stream);
}

int detok_pusher_ready(TextPusher *t) {
    int r = attr_true(t->flow, S_write_paused);
    if (r == 0) r = attr_true(t->cycle, S_disconnected);
    return r < 0 ? -1 : !r;
}

/* the chunk of `text` (and, in chat items mode, of `items`: a non-empty list, or NULL) after
 * `prefix` (the text's, or a typed pusher's reasoning prefix), the clock ticked, written: 0, or -1
 * with an exception set */
static int write_chunk(TextPusher *t, PyObject *prefix, PyObject *text, PyObject *items, PyObject *suffix) {
    Py_ssize_t n;
    const char *u = PyUnicode_Check(text) ? PyUnicode_AsUTF8AndSize(text, &n) : NULL;
    if (u == NULL) { /* not encodable: raised, as the Python pusher's encoder raises */
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a stream's text must be a str");
        return -1;
    }
    PyObject *chunk = items == NULL
        ? frame(PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix), u, n, PyBytes_AS_STRING(suffix),
                PyBytes_GET_SIZE(suffix))
        : frame_with(PyBytes_AS_STRING(t->prefix), PyBytes_GET_SIZE(t->prefix), u, n, t->mid, items,
                     PyBytes_AS_STRING(t->items_suffix), PyBytes_GET_SIZE(t->items_suffix));
    if (chunk == NULL) return -1;
    if (t->timer_text != Py_None) {
        PyObject *ok = PyObject_CallNoArgs(t->timer_text);
        if (ok == NULL) {
            Py_DECREF(chunk);
            return -1;
        }
        Py_DECREF(ok);
    }
    PyObject *ok = PyObject_CallOneArg(t->write, chunk);
    Py_DECREF(chunk);
    if (ok == NULL) return -1;
    Py_DECREF(ok);
    return 0;
}

int detok_push_chunk(TextPusher *t, PyObject *text, PyObject *items) {
    return write_chunk(t, t->prefix, text, items, t->suffix);
}

int detok_push_reasoning(TextPusher *t, PyObject *text) {
    return write_chunk(t, t->reasoning, text, NULL, t->suffix);
}

int detok_push_arguments(TextPusher *t, Py_ssize_t index, PyObject *text) {
    /* `"tool_calls":[{"index":I,"function":{"arguments":` JSON(text) `}}]` + the chunk's end: the
     * bytes of TypedChoice._fragments' one fragment, as msgspec encodes it */
    PyObject *prefix = Py_NewRef(t->calls_prefix), *call = PyBytes_FromFormat("[{\"index\":%zd,\"function\":{\"arguments\":", index);
    if (call == NULL) {
        Py_DECREF(prefix);
        return -1;
    }
    PyBytes_ConcatAndDel(&prefix, call); /* (a new object: calls_prefix has other references) */
    if (prefix == NULL) return -1;
    PyObject *end = PyBytes_FromStringAndSize("}}]", 3);
    if (end != NULL) PyBytes_Concat(&end, t->suffix);
    if (end == NULL) {
        Py_DECREF(prefix);
        return -1;
    }
    int r = write_chunk(t, prefix, text, NULL, end);
    Py_DECREF(end);
    Py_DECREF(prefix);
    return r;
}

static PyObject *push(TextPusher *t, PyObject *stream) {
    int r = detok_pusher_ready(t);
    if (r < 0) return NULL;
    if (!r) Py_RETURN_FALSE; /* the consumer's: a paused or gone client */
    /* text alone waiting (chat items mode: text and rendered items), the stream's own rule (None:
     * anything else, the Python pusher's) */
    PyObject *taken = PyObject_CallOneArg(t->take, stream);
    if (taken == NULL) return NULL;
    if (taken == Py_None) {
        Py_DECREF(taken);
        return call_fallback(t, stream);
    }
    PyObject *text = taken, *items = NULL;
    if (t->mid != NULL) { /* (text, items or None) */
        if (!PyTuple_CheckExact(taken) || PyTuple_GET_SIZE(taken) != 2
            || !(PyTuple_GET_ITEM(taken, 1) == Py_None || PyList_CheckExact(PyTuple_GET_ITEM(taken, 1)))) {
            PyErr_SetString(PyExc_TypeError, "take_items must give (text, a list of items or None)");
            Py_DECREF(taken);
            return NULL;
        }
        text = PyTuple_GET_ITEM(taken, 0);
        items = PyTuple_GET_ITEM(taken, 1);
        if (items == Py_None || PyList_GET_SIZE(items) == 0) items = NULL; /* no entries: logprobs null */
    }
    r = write_chunk(t, t->prefix, text, items, t->suffix);
    Py_DECREF(taken);
    if (r < 0) return NULL;
    Py_RETURN_TRUE;
}

static PyObject *TextPusher_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "TextPusher takes one argument, the stream");
        return NULL;
    }
    return push((TextPusher *)self, args[0]);
}

static PyObject *TextPusher_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"fallback", "flow", "cycle", "write", "timer_text", "prefix", "suffix", "mid", "items_suffix",
                         "typed", "reasoning", "sent_args", "calls_prefix", "parallel", "take", NULL};
    PyObject *fallback, *flow, *cycle, *write, *timer_text, *prefix, *suffix, *mid = NULL, *items_suffix = NULL;
    PyObject *take = NULL;
    PyObject *reasoning = Py_None, *sent_args = Py_None, *calls_prefix = Py_None;
    int typed = 0, parallel = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOSS|SS$pOOOpO", kw, &fallback, &flow, &cycle, &write, &timer_text,
                                     &prefix, &suffix, &mid, &items_suffix, &typed, &reasoning, &sent_args,
                                     &calls_prefix, &parallel, &take))
        return NULL;
    if (take == NULL || !PyCallable_Check(take)) {
        PyErr_SetString(PyExc_TypeError, "take= is required: the stream's take (take_text, or take_items with mid)");
        return NULL;
    }
    if ((reasoning != Py_None && !(typed && PyBytes_CheckExact(reasoning))) || (typed && mid != NULL)) {
        PyErr_SetString(PyExc_TypeError, "reasoning: bytes, for a typed pusher only; a typed pusher has no items mode");
        return NULL;
    }
    if ((sent_args == Py_None) != (calls_prefix == Py_None)
        || (sent_args != Py_None && !(typed && PyDict_CheckExact(sent_args) && PyBytes_CheckExact(calls_prefix)))) {
        PyErr_SetString(PyExc_TypeError, "sent_args and calls_prefix: a dict and bytes (a typed pusher's) or neither");
        return NULL;
    }
    if ((mid == NULL) != (items_suffix == NULL) || (mid != NULL && !(PyBytes_CheckExact(mid) && PyBytes_CheckExact(items_suffix)))) {
        PyErr_SetString(PyExc_TypeError, "mid and items_suffix: both bytes (chat items mode) or neither");
        return NULL;
    }
    if (!PyCallable_Check(fallback) || !PyCallable_Check(write) || (timer_text != Py_None && !PyCallable_Check(timer_text))) {
        PyErr_SetString(PyExc_TypeError, "fallback, write and timer_text (or None) must be callable");
        return NULL;
    }
    if (!PyBytes_CheckExact(prefix) || !PyBytes_CheckExact(suffix)) {
        PyErr_SetString(PyExc_TypeError, "prefix and suffix must be bytes");
        return NULL;
    }
    TextPusher *t = (TextPusher *)type->tp_alloc(type, 0);
    if (t == NULL) return NULL;
    t->fallback = Py_NewRef(fallback);
    t->take = Py_NewRef(take);
    t->flow = Py_NewRef(flow);
    t->cycle = Py_NewRef(cycle);
    t->write = Py_NewRef(write);
    t->timer_text = Py_NewRef(timer_text);
    t->prefix = Py_NewRef(prefix);
    t->suffix = Py_NewRef(suffix);
    t->mid = Py_XNewRef(mid);
    t->items_suffix = Py_XNewRef(items_suffix);
    t->typed = typed;
    t->reasoning = reasoning == Py_None ? NULL : Py_NewRef(reasoning);
    t->sent_args = sent_args == Py_None ? NULL : Py_NewRef(sent_args);
    t->calls_prefix = calls_prefix == Py_None ? NULL : Py_NewRef(calls_prefix);
    t->parallel = parallel;
    t->vectorcall = TextPusher_vectorcall;
    return (PyObject *)t;
}

static PyObject *TextPusher_get_fallback(TextPusher *t, void *closure) {
    return Py_NewRef(t->fallback != NULL ? t->fallback : Py_None);
}

static PyGetSetDef TextPusher_getset[] = {
    {"fallback", (getter)TextPusher_get_fallback, NULL, "the Python pusher, for everything but text alone", NULL},
    {NULL},
};

PyTypeObject detok_TextPusherType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "detok._native._chunkpush.TextPusher",
    .tp_basicsize = sizeof(TextPusher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "TextPusher(fallback, flow, cycle, write, timer_text, prefix, suffix[, mid, items_suffix], *, take, typed=False, "
              "reasoning=None): a text-only chunk pusher, or with mid and items_suffix one of text and the workers' chat "
              "logprobs items; typed: a parsed chat choice's, reasoning the prefix of its reasoning chunks (None: not shown)",
    .tp_new = TextPusher_new,
    .tp_dealloc = (destructor)TextPusher_dealloc,
    .tp_traverse = (traverseproc)TextPusher_traverse,
    .tp_clear = (inquiry)TextPusher_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(TextPusher, vectorcall),
    .tp_getset = TextPusher_getset,
};

static PyObject *idle_for_push(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyObject_TypeCheck(args[0], &detok_StreamFieldsType)) {
        PyErr_SetString(PyExc_TypeError, "idle_for_push(fields: StreamFields, typed: bool)");
        return NULL;
    }
    int typed = PyObject_IsTrue(args[1]);
    if (typed < 0) return NULL;
    return PyBool_FromLong(detok_fields_idle((StreamFields *)args[0], typed));
}

static PyMethodDef methods[] = {
    {"idle_for_push", (PyCFunction)(void (*)(void))idle_for_push, METH_FASTCALL,
     "idle_for_push(fields, typed) -> bool: push_rows' test of a stream (stream_fields.idle_for_push's twin)"},
    {"frame_text", frame_text, METH_VARARGS, "frame_text(prefix, text, suffix) -> the framed chunk of `text`"},
    {"push_rows", (PyCFunction)(void (*)(void))detok_push_rows, METH_FASTCALL,
     "push_rows(streams, stream_type, rids, texts, offsets, counts, finished, entries, kinds) -> the rows left to the "
     "caller "
     "(see _directrows.c)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_chunkpush", NULL, -1, methods};

PyMODINIT_FUNC PyInit__chunkpush(void) {
    init_escapes();
    if (PyType_Ready(&detok_TextPusherType) < 0) return NULL;
    if (!(S_write_paused = PyUnicode_InternFromString("write_paused")) ||
        !(S_disconnected = PyUnicode_InternFromString("disconnected")) ||
        detok_directrows_init() < 0 || detok_streamfields_ready() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "TextPusher", (PyObject *)&detok_TextPusherType) < 0
        || PyModule_AddObjectRef(m, "StreamFields", (PyObject *)&detok_StreamFieldsType) < 0
        || PyModule_AddObjectRef(m, "TypedFields", (PyObject *)&detok_TypedFieldsType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
