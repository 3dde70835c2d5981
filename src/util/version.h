/* version.h: the one version string every program prints for --version. */
#ifndef MT_VERSION_H
#define MT_VERSION_H

#define MT_VERSION "0.1"

#endif
