/* DecodeStream's compiled core (optional extension; stream_core.py has a Python class of the same
 * fields and results, which tests compare it with): the one-id step of a plain stream, its start
 * (`_open_plain`, and `StreamMaker`, which makes a plain stream without running `__init__`) and its
 * end (`finish` of a stream that holds nothing).
 *
 * Why C: a stream's set-up and end run once per request and its step once per token; in CPython
 * each attribute store or call goes through the interpreter, and these need dozens.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_utf8.h"
#include <stddef.h>

/* configure_stream's objects: the Delta type, EMPTY_DELTA, the dict reason -> Delta of a plain
 * end (decode_stream._ENDED), and the Python paths it was given: step_py(stream, ids),
 * finish_py(stream, reason=..., message=...) and flushed(decoder) (a decoder left as its flush
 * leaves it) */
static PyObject *delta_type = NULL, *empty_delta = NULL, *ended = NULL;
static PyObject *step_py = NULL, *finish_py = NULL, *flushed = NULL;
static PyObject *str_length = NULL;

/* step_py(c, ids): the Python step (configure_stream not called yet: an error) */
static PyObject *call_step_py(void *c, PyObject *ids) {
    if (step_py == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "StreamCore: configure_stream was not called");
        return NULL;
    }
    PyObject *call[2] = {(PyObject *)c, ids};
    return PyObject_Vectorcall(step_py, call, 2, NULL);
}

/* ---- StreamCore: DecodeStream's one-id step ------------------------------------------------ */
/* The base of detok.DecodeStream (decode_stream.py; a Python class of the same fields, in stream_core.py, is the
 * fallback without this extension). `step(id)` of a plain stream whose decoder holds nothing is a
 * table lookup here: the id's precomputed text (`texts`, the decode mode's, None where the bytes
 * are not whole characters) unless it is one of `stops`; every other call - a list of ids, a
 * finished stream, held bytes, a stop id - goes to the Python `_step_py`, which keeps `fast` true
 * only while this shortcut gives the text it would. */
/* A per-id table (texts, pieces): a tuple as the tables keep them (a tuple of str / bytes / None
 * is not tracked by the cycle collector, which would otherwise walk every id of every mode at
 * each full collection), or a list. */
static inline int is_table(PyObject *o) { return PyTuple_CheckExact(o) || PyList_CheckExact(o); }

typedef struct {
    PyObject_HEAD
    PyObject *texts;  /* tuple or list of str | None, or NULL/None: no shortcut */
    PyObject *pieces; /* tuple or list of bytes of the same ids, or NULL/None: ids of no whole text go to Python */
    PyObject *stops;  /* frozenset of ids that end or must be checked, or NULL */
    PyObject *deltas; /* list[Delta | None] of the same ids, the tables' (shared by their streams): a
                       * whole token's Delta is made once, not per step (it is immutable), or NULL */
    Py_ssize_t num_tokens, char_offset;
    char finished, fast;
    unsigned char held[MAX_PENDING]; /* while `fast`: the bytes of an incomplete character held */
    unsigned char held_len;
    /* DecodeStream's own fields, here so that a new stream starts with them as a plain one has
     * them (None, 0, False: no store per field) and `_set_plain` sets the rest in one call */
    PyObject *text, *stop, *pending_error, *stop_kind, *visible, *hidden, *stop_ids;
    PyObject *firsts; /* str: the first characters of its stop strings (NULL/None: none); while `fast`,
                       * an id's text with none of them is the shortcut's, any other goes to Python */
    Py_ssize_t vocab, min_tokens;
    char plain;
} StreamCore;



static int StreamCore_traverse(StreamCore *c, visitproc visit, void *arg) {
    Py_VISIT(c->texts);
    Py_VISIT(c->pieces);
    Py_VISIT(c->stops);
    Py_VISIT(c->deltas);
    Py_VISIT(c->text);
    Py_VISIT(c->stop);
    Py_VISIT(c->pending_error);
    Py_VISIT(c->stop_kind);
    Py_VISIT(c->visible);
    Py_VISIT(c->hidden);
    Py_VISIT(c->stop_ids);
    Py_VISIT(c->firsts);
    return 0;
}

static int StreamCore_clear(StreamCore *c) {
    Py_CLEAR(c->texts);
    Py_CLEAR(c->pieces);
    Py_CLEAR(c->stops);
    Py_CLEAR(c->deltas);
    Py_CLEAR(c->text);
    Py_CLEAR(c->stop);
    Py_CLEAR(c->pending_error);
    Py_CLEAR(c->stop_kind);
    Py_CLEAR(c->visible);
    Py_CLEAR(c->hidden);
    Py_CLEAR(c->stop_ids);
    Py_CLEAR(c->firsts);
    return 0;
}

static void StreamCore_dealloc(StreamCore *c) { /* (a Python subclass's dealloc releases its type) */
    PyObject_GC_UnTrack(c);
    StreamCore_clear(c);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

/* An id whose bytes are part of a character, or bytes held before it: the stream's incremental
 * UTF-8 (as ByteTextDecoder's, which gets the held bytes back before Python steps the stream). */
static PyObject *core_step_bytes(StreamCore *c, PyObject *piece) {
    unsigned char small[64], *data = small;
    Py_ssize_t n = PyBytes_GET_SIZE(piece), size = c->held_len + n, used = 0;
    if (size > (Py_ssize_t)sizeof(small) && (data = PyMem_Malloc(size)) == NULL) return PyErr_NoMemory();
    memcpy(data, c->held, c->held_len);
    memcpy(data + c->held_len, PyBytes_AS_STRING(piece), n);
    Text out = {NULL, 0, 0};
    PyObject *result = NULL;
    int64_t chars = utf8_replace(&out, data, size, &used);
    if (chars >= 0 && size - used > MAX_PENDING - 1) { /* cannot happen: a held prefix is < 4 bytes */
        PyErr_SetString(PyExc_ValueError, "incomplete UTF-8 tail too long");
        chars = -1;
    }
    if (chars >= 0) {
        memcpy(c->held, data + used, size - used);
        c->held_len = (unsigned char)(size - used);
        c->num_tokens++;
        if (chars == 0) {
            result = Py_NewRef(empty_delta);
        } else {
            PyObject *text = PyUnicode_DecodeUTF8(out.data, out.size, "strict");
            if (text != NULL) {
                c->char_offset += chars;
                result = PyObject_CallOneArg(delta_type, text);
                Py_DECREF(text);
            }
        }
    }
    PyMem_Free(out.data);
    if (data != small) PyMem_Free(data);
    return result;
}

static PyObject *StreamCore_get_held(StreamCore *c, void *closure) {
    return PyBytes_FromStringAndSize((const char *)c->held, c->held_len);
}

static int StreamCore_set_held(StreamCore *c, PyObject *value, void *closure) {
    if (value == NULL || !PyBytes_Check(value) || PyBytes_GET_SIZE(value) > MAX_PENDING - 1) {
        PyErr_SetString(PyExc_ValueError, "_held: bytes of an incomplete character (at most 3)");
        return -1;
    }
    c->held_len = (unsigned char)PyBytes_GET_SIZE(value);
    memcpy(c->held, PyBytes_AS_STRING(value), c->held_len);
    return 0;
}

/* The core's fields as attributes (DecodeStream's Python code reads and writes them): each a getter
 * and setter of one kind, the field's offset in StreamCore as its closure. */
#define FIELD_AT(c, closure, T) ((T *)((char *)(c) + (Py_ssize_t)(closure)))

static PyObject *field_get_obj(StreamCore *c, void *closure) {
    PyObject *v = *FIELD_AT(c, closure, PyObject *);
    return Py_NewRef(v != NULL ? v : Py_None);
}

static int field_set_obj(StreamCore *c, PyObject *value, void *closure) {
    Py_XSETREF(*FIELD_AT(c, closure, PyObject *), Py_XNewRef(value));
    return 0;
}

static PyObject *field_get_ssize(StreamCore *c, void *closure) {
    return PyLong_FromSsize_t(*FIELD_AT(c, closure, Py_ssize_t));
}

static int field_set_ssize(StreamCore *c, PyObject *value, void *closure) {
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "can't delete numeric/char attribute");
        return -1;
    }
    Py_ssize_t v = PyLong_AsSsize_t(value);
    if (v == -1 && PyErr_Occurred()) return -1;
    *FIELD_AT(c, closure, Py_ssize_t) = v;
    return 0;
}

static PyObject *field_get_flag(StreamCore *c, void *closure) {
    return PyBool_FromLong(*FIELD_AT(c, closure, char));
}

static int field_set_flag(StreamCore *c, PyObject *value, void *closure) {
    if (value == NULL || !PyBool_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "attribute value type must be bool");
        return -1;
    }
    *FIELD_AT(c, closure, char) = value == Py_True;
    return 0;
}

#define FIELD(name, kind, field, doc) \
    {name, (getter)field_get_##kind, (setter)field_set_##kind, doc, (void *)offsetof(StreamCore, field)}

static PyGetSetDef StreamCore_getset[] = {
    {"_held", (getter)StreamCore_get_held, (setter)StreamCore_set_held, "held bytes of the compiled step", NULL},
    FIELD("_texts", obj, texts, "the shortcut's texts per id (or None)"),
    FIELD("_stops", obj, stops, "ids the shortcut leaves to _step_py"),
    FIELD("_pieces", obj, pieces, "the shortcut's bytes per id (or None)"),
    FIELD("_deltas", obj, deltas, "the shortcut's Delta per whole id, made once (or None)"),
    FIELD("_text", obj, text, "the request's text decoder"),
    FIELD("_stop", obj, stop, "its stop string matcher (or None)"),
    FIELD("_pending_error", obj, pending_error, "a bad prompt tail's error (or None)"),
    FIELD("stop_kind", obj, stop_kind, "what stopped the request (or None)"),
    FIELD("_visible", obj, visible, "stop ids whose text is kept"),
    FIELD("_hidden", obj, hidden, "stop ids whose text is dropped"),
    FIELD("_stop_ids", obj, stop_ids, "every stop id"),
    FIELD("_vocab", ssize, vocab, "the tokenizer's vocab_size"),
    FIELD("_min_tokens", ssize, min_tokens, "stop rules wait for this many tokens"),
    FIELD("_plain", flag, plain, "no stop string and no min_tokens"),
    FIELD("_firsts", obj, firsts, "its stop strings' first characters (or None)"),
    FIELD("num_tokens", ssize, num_tokens, "output tokens consumed"),
    FIELD("char_offset", ssize, char_offset, "chars emitted"),
    FIELD("finished", flag, finished, "the request ended"),
    FIELD("_fast", flag, fast, "step(id) may take the shortcut"),
    {NULL},
};

static PyObject *StreamCore_step(StreamCore *c, PyObject *arg) {
    if (c->finished) return Py_NewRef(empty_delta);
    PyObject *orig = arg;
    if (PyList_CheckExact(arg) && PyList_GET_SIZE(arg) == 1) arg = PyList_GET_ITEM(arg, 0); /* step([id]) */
    if (c->fast && PyLong_CheckExact(arg) && c->texts != NULL && is_table(c->texts)) {
        Py_ssize_t i = PyLong_AsSsize_t(arg);
        if (i == -1 && PyErr_Occurred()) {
            PyErr_Clear();
        } else if (i >= 0 && i < PySequence_Fast_GET_SIZE(c->texts)) {
            PyObject *t = PySequence_Fast_GET_ITEM(c->texts, i);
            int stop = 0;
            if (c->stops != NULL && PyAnySet_Check(c->stops) && PySet_GET_SIZE(c->stops)) {
                stop = PySet_Contains(c->stops, arg);
                if (stop < 0) return NULL;
            }
            PyObject *firsts = c->firsts;
            if (firsts != NULL && firsts != Py_None) { /* stop strings: whole text none of whose chars begins one */
                if (stop || t == Py_None || c->held_len || !PyUnicode_CheckExact(t) || !PyUnicode_Check(firsts))
                    return call_step_py(c, orig);
                Py_ssize_t tn = PyUnicode_GET_LENGTH(t), fn = PyUnicode_GET_LENGTH(firsts);
                for (Py_ssize_t f = 0; f < fn; f++)
                    if (PyUnicode_FindChar(t, PyUnicode_READ_CHAR(firsts, f), 0, tn, 1) != -1)
                        return call_step_py(c, orig);
            }
            if (!stop && t != Py_None && c->held_len == 0 && PyUnicode_CheckExact(t)) {
                c->num_tokens++;
                Py_ssize_t n = PyUnicode_GET_LENGTH(t);
                if (n == 0) return Py_NewRef(empty_delta);
                c->char_offset += n;
                if (c->deltas == NULL || !PyList_CheckExact(c->deltas) || i >= PyList_GET_SIZE(c->deltas))
                    return PyObject_CallOneArg(delta_type, t);
                PyObject *d = PyList_GET_ITEM(c->deltas, i);
                if (d == Py_None) {
                    if ((d = PyObject_CallOneArg(delta_type, t)) == NULL) return NULL;
                    PyList_SET_ITEM(c->deltas, i, Py_NewRef(d));
                    Py_DECREF(Py_None); /* the reference the list held */
                    return d;
                }
                return Py_NewRef(d);
            }
            if (!stop && c->pieces != NULL && is_table(c->pieces) && i < PySequence_Fast_GET_SIZE(c->pieces) &&
                PyBytes_CheckExact(PySequence_Fast_GET_ITEM(c->pieces, i)))
                return core_step_bytes(c, PySequence_Fast_GET_ITEM(c->pieces, i));
        }
    }
    return call_step_py(c, orig);
}

static PyObject *configure_stream(PyObject *self, PyObject *args) {
    PyObject *dt, *ed, *en, *sp, *fp, *fl;
    if (!PyArg_ParseTuple(args, "OOO!OOO", &dt, &ed, &PyDict_Type, &en, &sp, &fp, &fl)) return NULL;
    if (!PyCallable_Check(sp) || !PyCallable_Check(fp) || !PyCallable_Check(fl)) {
        PyErr_SetString(PyExc_TypeError, "configure_stream: step_py, finish_py and flushed must be callable");
        return NULL;
    }
    Py_XSETREF(step_py, Py_NewRef(sp));
    Py_XSETREF(finish_py, Py_NewRef(fp));
    Py_XSETREF(flushed, Py_NewRef(fl));
    Py_XSETREF(delta_type, Py_NewRef(dt));
    Py_XSETREF(empty_delta, Py_NewRef(ed));
    Py_XSETREF(ended, Py_NewRef(en));
    Py_RETURN_NONE;
}



/* ---- a plain stream's start ------------------------------------------------------------------ */
/* Whether a prompt tail (the last `max_context` ids of the list or tuple `context`, not empty)
 * leaves a byte decoder holding nothing: ids, all in [0, n), the last one's text (`texts`, str or
 * None per id) non-empty whole characters (byte_text._ends_whole). */
static int tail_is_whole(PyObject *texts, PyObject *context, Py_ssize_t n, Py_ssize_t max_context) {
    Py_ssize_t size = PySequence_Fast_GET_SIZE(context), first = size > max_context ? size - max_context : 0;
    PyObject **items = PySequence_Fast_ITEMS(context);
    if (size == first || n > PySequence_Fast_GET_SIZE(texts)) return 0;
    long long id = -1;
    for (Py_ssize_t k = first; k < size; k++) {
        id = PyLong_Check(items[k]) ? PyLong_AsLongLong(items[k]) : -1;
        if (id == -1 && PyErr_Occurred()) PyErr_Clear();
        if (id < 0 || id >= n) return 0;
    }
    PyObject *text = PySequence_Fast_GET_ITEM(texts, id);
    return PyUnicode_Check(text) && PyUnicode_GET_LENGTH(text) > 0;
}

/* whole_tail(texts, context, n, max_context) -> bool (tail_is_whole; the tests' handle on it) */
static PyObject *whole_tail(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !is_table(args[0]) || !(PyList_Check(args[1]) || PyTuple_Check(args[1]))) {
        PyErr_SetString(PyExc_TypeError, "whole_tail(texts: list or tuple, context: list or tuple, n, max_context)");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[2]), max_context = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred()) return NULL;
    return PyBool_FromLong(tail_is_whole(args[0], args[1], n, max_context));
}

/* What every plain stream of one tokenizer, decode mode and EOS rule starts from (the tuple of
 * DecodePlan.plain_template): a decoder holding nothing, to copy; the mode's texts, pieces (or None)
 * and Deltas; the stop ids and the empty set; the tokenizer's vocab size; whether an empty prompt
 * leaves a leading space to strip; the prompt tail's length; the ids a tail may hold (the mode's
 * table's: at most its texts). */
typedef struct {
    PyObject *decoder, *slots; /* the decoder's prototype, and the descriptors of its fields (a tuple) */
    descrgetfunc slot_get;
    descrsetfunc slot_set;
    PyObject *texts, *pieces, *deltas, *stops, *no_ids;
    Py_ssize_t vocab, max_context, tail_ids;
    int strip;
} Template;

static int parse_template(PyObject *t, Template *out) {
    if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != 10) goto bad;
    PyObject **f = &PyTuple_GET_ITEM(t, 0);
    /* the decoder: (prototype, descriptors of its fields, all of one descriptor type), copied field by
     * field through the descriptors' own get and set */
    if (!PyTuple_CheckExact(f[0]) || PyTuple_GET_SIZE(f[0]) != 2 || !PyTuple_CheckExact(PyTuple_GET_ITEM(f[0], 1))) goto bad;
    PyObject *slots = PyTuple_GET_ITEM(f[0], 1);
    if (PyTuple_GET_SIZE(slots) == 0) goto bad;
    PyTypeObject *descr_type = Py_TYPE(PyTuple_GET_ITEM(slots, 0));
    for (Py_ssize_t k = 1; k < PyTuple_GET_SIZE(slots); k++)
        if (Py_TYPE(PyTuple_GET_ITEM(slots, k)) != descr_type) goto bad;
    descrgetfunc slot_get = (descrgetfunc)PyType_GetSlot(descr_type, Py_tp_descr_get);
    descrsetfunc slot_set = (descrsetfunc)PyType_GetSlot(descr_type, Py_tp_descr_set);
    if (slot_get == NULL || slot_set == NULL) goto bad;
    if (!is_table(f[1]) || !(f[2] == Py_None || is_table(f[2])) || !PyList_CheckExact(f[3])) goto bad;
    if (!PyFrozenSet_CheckExact(f[4]) || !PyFrozenSet_CheckExact(f[5]) || !PyBool_Check(f[7])) goto bad;
    Py_ssize_t vocab = PyLong_AsSsize_t(f[6]), max_context = PyLong_AsSsize_t(f[8]), tail_ids = PyLong_AsSsize_t(f[9]);
    if (PyErr_Occurred()) return -1;
    if (vocab <= 0 || max_context <= 0 || tail_ids <= 0 || tail_ids > PySequence_Fast_GET_SIZE(f[1])) goto bad;
    *out = (Template){PyTuple_GET_ITEM(f[0], 0), slots, slot_get, slot_set, f[1], f[2], f[3], f[4], f[5],
                      vocab, max_context, tail_ids, f[7] == Py_True};
    return 0;
bad:
    PyErr_SetString(PyExc_TypeError, "plain template: ((decoder, its field descriptors), texts: list | tuple, pieces: list | tuple | None, deltas: list, "
                                     "stops: frozenset, no_ids: frozenset, vocab > 0, strip: bool, max_context > 0, "
                                     "0 < tail_ids <= len(texts))");
    return -1;
}

/* A copy of the template's decoder: a new instance of its class with each field the descriptors
 * name set as the prototype has it (an unset one left unset) */
static PyObject *copy_decoder(const Template *t) {
    PyTypeObject *type = Py_TYPE(t->decoder);
    PyObject *copy = PyType_GenericAlloc(type, 0);
    if (copy == NULL) return NULL;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(t->slots); k++) {
        PyObject *d = PyTuple_GET_ITEM(t->slots, k);
        PyObject *value = t->slot_get(d, t->decoder, (PyObject *)type);
        if (value == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) goto error;
            PyErr_Clear();
            continue;
        }
        int r = t->slot_set(d, copy, value);
        Py_DECREF(value);
        if (r < 0) goto error;
    }
    return copy;
error:
    Py_DECREF(copy);
    return NULL;
}

static int open_plain(StreamCore *c, const Template *t, PyObject *context) {
    if (PySequence_Fast_GET_SIZE(context) ? !tail_is_whole(t->texts, context, t->tail_ids, t->max_context) : t->strip)
        return 0;
    PyObject *decoder = copy_decoder(t);
    if (decoder == NULL) return -1;
    Py_XSETREF(c->text, decoder);
    Py_XSETREF(c->texts, Py_NewRef(t->texts));
    Py_XSETREF(c->pieces, Py_NewRef(t->pieces));
    Py_XSETREF(c->deltas, Py_NewRef(t->deltas));
    Py_XSETREF(c->stops, Py_NewRef(t->stops));
    Py_XSETREF(c->hidden, Py_NewRef(t->stops));
    Py_XSETREF(c->stop_ids, Py_NewRef(t->stops));
    Py_XSETREF(c->visible, Py_NewRef(t->no_ids));
    c->vocab = t->vocab;
    c->plain = c->fast = 1;
    c->held_len = 0;
    return 1;
}

/* _open_plain(template, context) -> bool: open_plain on this (new) stream */
static PyObject *StreamCore_open_plain(StreamCore *c, PyObject *const *args, Py_ssize_t nargs) {
    Template t;
    if (nargs != 2 || !(PyList_Check(args[1]) || PyTuple_Check(args[1]))) {
        PyErr_SetString(PyExc_TypeError, "_open_plain(template, context: list or tuple)");
        return NULL;
    }
    if (parse_template(args[0], &t) < 0) return NULL;
    int opened = open_plain(c, &t, args[1]);
    return opened < 0 ? NULL : PyBool_FromLong(opened);
}

/* ---- a plain stream's end -------------------------------------------------------------------- */
/* finish(reason="length", message=None) -> Delta. A plain stream holding nothing, without a message,
 * ends here with the reason's shared Delta (what `_finish_py` gives it, without a Python call);
 * everything else is `_finish_py`. */
static PyObject *StreamCore_finish(StreamCore *c, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs + nkw > 2) {
        PyErr_SetString(PyExc_TypeError, "finish(reason='length', message=None) takes at most 2 arguments");
        return NULL;
    }
    if (nkw == 0 && !c->finished && c->fast && c->held_len == 0 && ended != NULL && c->text != NULL &&
        (nargs < 2 || args[1] == Py_None)) {
        PyObject *reason = nargs ? args[0] : str_length;
        PyObject *delta = PyUnicode_CheckExact(reason) ? PyDict_GetItemWithError(ended, reason) : NULL;
        if (delta == NULL && PyErr_Occurred()) return NULL;
        if (delta != NULL) {
            /* the decoder as its flush leaves it (its held bytes lived here) */
            PyObject *ok = flushed != NULL ? PyObject_CallOneArg(flushed, c->text) : NULL;
            if (ok == NULL) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "StreamCore: configure_stream was not called");
                return NULL;
            }
            Py_DECREF(ok);
            c->finished = 1;
            c->fast = 0;
            return Py_NewRef(delta);
        }
    }
    if (finish_py == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "StreamCore: configure_stream was not called");
        return NULL;
    }
    PyObject *call[3] = {(PyObject *)c, nargs + nkw > 0 ? args[0] : NULL, nargs + nkw > 1 ? args[1] : NULL};
    return PyObject_Vectorcall(finish_py, call, nargs + 1, kwnames);
}

static PyMethodDef StreamCore_methods[] = {
    {"step", (PyCFunction)StreamCore_step, METH_O, "step(token_ids) -> Delta (a list of ids, or one int)."},
    {"finish", (PyCFunction)(void (*)(void))StreamCore_finish, METH_FASTCALL | METH_KEYWORDS,
     "finish(reason='length', message=None) -> Delta: the scheduler ended the request."},
    {"_open_plain", (PyCFunction)(void (*)(void))StreamCore_open_plain, METH_FASTCALL,
     "_open_plain(template, context) -> bool: a new plain stream's fields, where its prompt tail allows."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject StreamCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "detok._native._streamcore.StreamCore",
    .tp_basicsize = sizeof(StreamCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "DecodeStream's compiled core (see stream_core.py).",
    .tp_new = PyType_GenericNew,
    .tp_alloc = PyType_GenericAlloc,
    .tp_free = PyObject_GC_Del,
    .tp_traverse = (traverseproc)StreamCore_traverse,
    .tp_clear = (inquiry)StreamCore_clear,
    .tp_dealloc = (destructor)StreamCore_dealloc,
    .tp_getset = StreamCore_getset,
    .tp_methods = StreamCore_methods,
};

/* ---- StreamMaker: many streams of one tokenizer and params ------------------------------------ */
/* StreamMaker(cls, fallback, template) -> maker; maker(context) -> a `cls` stream: made here from
 * the template (a tuple, as _open_plain's) where the prompt tail allows, without running
 * `cls.__init__`; `fallback(context)` (cls's constructor with the same arguments) otherwise, or
 * always where the template is None. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *cls;
    PyObject *fallback, *template; /* template: a tuple, or None */
    Template t;                    /* the template's fields (borrowed from it) */
} StreamMaker;

static PyObject *StreamMaker_call(StreamMaker *m, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "a stream maker takes one argument: the prompt's ids (context_ids)");
        return NULL;
    }
    PyObject *context = args[0];
    if (m->template != Py_None && (PyList_Check(context) || PyTuple_Check(context))) {
        StreamCore *c = (StreamCore *)m->cls->tp_alloc(m->cls, 0);
        if (c == NULL) return NULL;
        int opened = open_plain(c, &m->t, context);
        if (opened > 0) return (PyObject *)c;
        Py_DECREF(c);
        if (opened < 0) return NULL;
    }
    return PyObject_CallOneArg(m->fallback, context);
}

static PyObject *StreamMaker_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *cls, *fallback, *template;
    if (!PyArg_ParseTuple(args, "O!OO:StreamMaker", &PyType_Type, &cls, &fallback, &template)) return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)cls, &StreamCoreType) || !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "StreamMaker(cls: a StreamCore subclass, fallback: callable, template)");
        return NULL;
    }
    Template t = {0};
    if (template != Py_None && parse_template(template, &t) < 0) return NULL;
    StreamMaker *m = (StreamMaker *)type->tp_alloc(type, 0);
    if (m == NULL) return NULL;
    m->vectorcall = (vectorcallfunc)StreamMaker_call;
    m->cls = (PyTypeObject *)Py_NewRef(cls);
    m->fallback = Py_NewRef(fallback);
    m->template = Py_NewRef(template);
    m->t = t;
    return (PyObject *)m;
}

static PyObject *StreamMaker_tp_call(PyObject *m, PyObject *args, PyObject *kwds) {
    return PyVectorcall_Call(m, args, kwds);
}

static int StreamMaker_traverse(StreamMaker *m, visitproc visit, void *arg) {
    Py_VISIT(m->cls);
    Py_VISIT(m->fallback);
    Py_VISIT(m->template);
    return 0;
}

static int StreamMaker_clear(StreamMaker *m) {
    Py_CLEAR(m->fallback);
    /* (cls and the template stay until dealloc: a call during a collection must not read freed memory) */
    return 0;
}

static void StreamMaker_dealloc(StreamMaker *m) {
    PyObject_GC_UnTrack(m);
    Py_CLEAR(m->fallback);
    Py_CLEAR(m->template);
    Py_CLEAR(m->cls);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyTypeObject StreamMakerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "detok._native._streamcore.StreamMaker",
    .tp_basicsize = sizeof(StreamMaker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "maker(context_ids) -> a plain stream made without __init__ (see DecodeStream.opener).",
    .tp_vectorcall_offset = offsetof(StreamMaker, vectorcall),
    .tp_call = StreamMaker_tp_call,
    .tp_new = StreamMaker_new,
    .tp_traverse = (traverseproc)StreamMaker_traverse,
    .tp_clear = (inquiry)StreamMaker_clear,
    .tp_dealloc = (destructor)StreamMaker_dealloc,
};

static PyMethodDef methods[] = {
    {"configure_stream", configure_stream, METH_VARARGS,
     "configure_stream(Delta, EMPTY_DELTA, ended, step_py, finish_py, flushed): what StreamCore returns (ended: reason -> "
     "Delta of a plain end) and the Python paths it calls."},
    {"whole_tail", (PyCFunction)(void (*)(void))whole_tail, METH_FASTCALL,
     "whole_tail(texts, context, n, max_context) -> bool: a prompt tail that leaves nothing held."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_streamcore", NULL, -1, methods};

static int intern(PyObject **name, const char *s) {
    return *name != NULL || (*name = PyUnicode_InternFromString(s)) != NULL ? 0 : -1;
}

PyMODINIT_FUNC PyInit__streamcore(void) {
    if (PyType_Ready(&StreamCoreType) < 0 || PyType_Ready(&StreamMakerType) < 0) return NULL;
    if (intern(&str_length, "length") < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "StreamCore", (PyObject *)&StreamCoreType) < 0 ||
        PyModule_AddObjectRef(m, "StreamMaker", (PyObject *)&StreamMakerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
