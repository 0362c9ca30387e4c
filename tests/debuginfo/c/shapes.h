/* Inline helpers included by probed.c: each is inlined at several call sites at -O2. */
#ifndef SHAPES_H
#define SHAPES_H

struct point {
	int x;
	int y;
};

struct flags {
	unsigned int ready : 1;
	unsigned int level : 3;
	signed int delta : 5;
	unsigned int wide : 20;
};

struct shape {
	const char *name;
	struct point origin;
	struct {
		struct point corner;
		unsigned long area;
	} box;
	struct flags flags;
	struct shape *next;
};

static inline int clamp(int value, int low, int high)
{
	if (value < low)
		return low;
	if (value > high)
		return high;
	return value;
}

static inline long shape_area(const struct shape *s)
{
	long width = s->box.corner.x - s->origin.x;
	long height = s->box.corner.y - s->origin.y;

	return width * height;
}

#endif
