// Writes Parquet files with writers that are not this project's: Apache Arrow's Rust writer
// (the `parquet` crate, compiled to WebAssembly as parquet-wasm) and hyparquet-writer (a
// JavaScript writer of its own). The tests of data/parquet_reader.h and titan_tokenize read
// what they write and compare it with the same documents given as JSON lines.
//
//   TITAN_REFERENCE_MODULES=.cache/npm/parquet_reference/node_modules node writer.js SPEC.json
//
// SPEC: {"files": [FILE...]}, each FILE:
//   path          the Parquet file to write
//   documents     a JSON lines file: every line an object whose fields become the columns
//                 (strings, or null; "id" a number becomes an INT64 column, "score" a DOUBLE)
//   writer        "parquet-wasm" (default) or "hyparquet"
//   compression   UNCOMPRESSED, SNAPPY, GZIP, ZSTD (ZSTD: parquet-wasm only); parquet-wasm's
//                 others too (BROTLI, LZ4_RAW), for the refusals
//   dictionary    true: dictionary-encoded pages (falling back to PLAIN when the dictionary
//                 outgrows dictionary_page_bytes); false: PLAIN
//   encoding      without a dictionary, another encoding than PLAIN for the string columns
//                 (DELTA_BYTE_ARRAY, ...)
//   nested        true: two nested columns more, "tags" (a list of strings) and "meta" (a
//                 struct of one string, "lang") (parquet-wasm)
//   version       1 or 2: data pages v1 or v2 (hyparquet writes v2 only)
//   nullable      true: OPTIONAL string columns (definition levels); false: REQUIRED
//   row_group_rows, page_bytes, dictionary_page_bytes   sizes (parquet-wasm)
//   crc           true: every page header gets its CRC-32 (added afterwards, see add_crcs)
//   bad_crc       true: ... and the first data page's CRC is off by one
// Relative paths are read and written in the current folder. The file is written whole, or
// not at all.
import fs from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import zlib from 'node:zlib'

// The packages live where scripts/setup.sh --tests installed them (TITAN_REFERENCE_MODULES, a
// node_modules folder), not beside this file.
const modules = process.env.TITAN_REFERENCE_MODULES
if (!modules) throw new Error('TITAN_REFERENCE_MODULES (the node_modules folder) is not set')
const resolve = createRequire(path.join(path.dirname(modules), 'writer.js')).resolve
const load = async (name) => import(pathToFileURL(resolve(name)).href)
const arrow_module = await load('apache-arrow')
const arrow = arrow_module.vectorFromArray ? arrow_module : arrow_module.default
const pq = await load('parquet-wasm')
const { parquetWriteBuffer, ByteWriter } = await load('hyparquet-writer')
const { serializeTCompactProtocol } = await load('hyparquet-writer/src/thrift.js')
const { deserializeTCompactProtocol } = await load('hyparquet/src/thrift.js')

function read_documents(path) {
  const rows = []
  for (const line of fs.readFileSync(path, 'utf8').split('\n')) {
    if (line.length > 0) rows.push(JSON.parse(line))
  }
  if (rows.length === 0) throw new Error(`${path}: no documents`)
  return rows
}

// Column name -> values, in the first row's field order.
function columns_of(rows) {
  const names = Object.keys(rows[0])
  const columns = {}
  for (const name of names) columns[name] = rows.map((row) => (name in row ? row[name] : null))
  return columns
}

function arrow_table(columns, nullable, nested) {
  const fields = []
  const data = {}
  for (const [name, values] of Object.entries(columns)) {
    let type
    if (name === 'id') type = new arrow.Int64()
    else if (name === 'score') type = new arrow.Float64()
    else type = new arrow.Utf8()
    const has_null = values.some((v) => v === null)
    if (!nullable && has_null) throw new Error(`column ${name} holds a null and nullable is false`)
    const vector = arrow.vectorFromArray(
      name === 'id' ? values.map((v) => (v === null ? null : BigInt(v))) : values, type)
    fields.push(new arrow.Field(name, type, nullable || has_null))
    data[name] = vector
  }
  if (nested) {
    const rows = Object.values(columns)[0].length
    const item = new arrow.Field('item', new arrow.Utf8(), true)
    const tags = new arrow.List(item)
    fields.push(new arrow.Field('tags', tags, true))
    data.tags = arrow.vectorFromArray(Array.from({ length: rows }, (_, i) => ['t' + i, 'u']), tags)
    const meta = new arrow.Struct([new arrow.Field('lang', new arrow.Utf8(), true)])
    fields.push(new arrow.Field('meta', meta, true))
    data.meta = arrow.vectorFromArray(Array.from({ length: rows }, () => ({ lang: 'en' })), meta)
  }
  const schema = new arrow.Schema(fields)
  const batch = new arrow.RecordBatch(schema, arrow.makeData({
    type: new arrow.Struct(fields),
    length: Object.values(data)[0].length,
    children: Object.values(data).map((vector) => vector.data[0]),
  }))
  return new arrow.Table(schema, [batch])
}

function write_parquet_wasm(file, columns) {
  let builder = new pq.WriterPropertiesBuilder()
    .setCompression(pq.Compression[file.compression])
    .setDictionaryEnabled(!!file.dictionary)
    // The fallback after a dictionary, and the encoding without one: PLAIN (a v2 writer would
    // choose DELTA_BYTE_ARRAY for strings otherwise).
    .setEncoding(pq.Encoding.PLAIN)
    .setWriterVersion(file.version === 2 ? pq.WriterVersion.V2 : pq.WriterVersion.V1)
    .setStatisticsEnabled(pq.EnabledStatistics.None)
    .setMaxRowGroupSize(file.row_group_rows ?? 1024 * 1024)
    .setDataPageSizeLimit(file.page_bytes ?? 1024 * 1024)
    .setDictionaryPageSizeLimit(file.dictionary_page_bytes ?? 1024 * 1024)
    .setWriteBatchSize(16)
  // Another encoding for the string columns only (DELTA_BYTE_ARRAY has no meaning for INT64).
  if (file.encoding) {
    for (const [name, values] of Object.entries(columns)) {
      if (name !== 'id' && name !== 'score') builder = builder.setColumnEncoding(name, pq.Encoding[file.encoding])
    }
  }
  const props = builder.build()
  const table = arrow_table(columns, !!file.nullable, !!file.nested)
  return pq.writeParquet(pq.Table.fromIPCStream(arrow.tableToIPC(table, 'stream')), props)
}

function write_hyparquet(file, columns) {
  const compressors = { GZIP: (bytes) => new Uint8Array(zlib.gzipSync(bytes)) }
  const columnData = Object.entries(columns).map(([name, data]) => {
    const column = { name, data, nullable: !!file.nullable }
    if (name === 'id') Object.assign(column, { type: 'INT64', data: data.map((v) => BigInt(v)) })
    else if (name === 'score') column.type = 'DOUBLE'
    else column.type = 'STRING'
    // Asked for, not left to hyparquet's choice (it keeps a dictionary only where it halves
    // the size).
    if (column.type === 'STRING') column.encoding = file.dictionary ? 'RLE_DICTIONARY' : 'PLAIN'
    return column
  })
  return parquetWriteBuffer({
    columnData,
    codec: file.compression,
    compressors,
    statistics: false,
    rowGroupSize: file.row_group_rows ?? 100000,
    pageSize: file.page_bytes ?? 1024 * 1024,
  })
}

// --- CRCs: the file re-framed with a crc field (PageHeader field 4) in every page header -----

function reader_at(bytes, offset) {
  return { view: new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength), offset }
}

function thrift_bytes(object) {
  const writer = new ByteWriter()
  serializeTCompactProtocol(writer, object)
  return new Uint8Array(writer.getBuffer())
}

// A struct's fields sorted by id, as the compact protocol writes them.
function sorted(object) {
  const out = {}
  for (const key of Object.keys(object).sort((a, b) => Number(a.slice(6)) - Number(b.slice(6)))) {
    out[key] = object[key]
  }
  return out
}

function add_crcs(bytes, bad_crc) {
  const footer_length = new DataView(bytes.buffer, bytes.byteOffset).getUint32(bytes.length - 8, true)
  const footer_at = bytes.length - 8 - footer_length
  const meta = deserializeTCompactProtocol(reader_at(bytes, footer_at))
  const out = [bytes.subarray(0, 4)]
  let at = 4
  let first_data_page = true
  for (const group of meta.field_4) {  // FileMetaData.row_groups
    let group_bytes = 0n
    for (const chunk of group.field_1) {  // RowGroup.columns
      const cmd = chunk.field_3  // ColumnChunk.meta_data
      const begin = Number(cmd.field_11 ?? cmd.field_9)  // dictionary_page_offset, data_page_offset
      const end = begin + Number(cmd.field_7)  // total_compressed_size
      const new_begin = at
      let new_data_page_offset = null
      let pos = begin
      let values = 0n
      while (pos < end) {
        const reader = reader_at(bytes, pos)
        const header = deserializeTCompactProtocol(reader)
        const body = bytes.subarray(reader.offset, reader.offset + header.field_3)
        let crc = zlib.crc32(body)
        const is_data = header.field_1 === 0 || header.field_1 === 3
        if (is_data && first_data_page && bad_crc) {
          crc = (crc + 1) >>> 0
          first_data_page = false
        }
        header.field_4 = crc | 0  // an i32
        const framed = thrift_bytes(sorted(header))
        if (is_data && new_data_page_offset === null) new_data_page_offset = at
        out.push(framed, body)
        at += framed.length + body.length
        pos = reader.offset + header.field_3
        values += BigInt(framed.length + body.length)
      }
      if (cmd.field_11 !== undefined) cmd.field_11 = BigInt(new_begin)
      cmd.field_9 = BigInt(new_data_page_offset)
      const grown = values - cmd.field_7
      cmd.field_7 = values
      cmd.field_6 = cmd.field_6 + grown  // total_uncompressed_size counts the headers too
      chunk.field_2 = BigInt(new_begin)  // file_offset
      for (const key of ['field_4', 'field_5', 'field_6', 'field_7']) delete chunk[key]  // page indexes
      group_bytes += values
    }
    group.field_6 = group_bytes  // total_compressed_size
    if (group.field_5 !== undefined) group.field_5 = BigInt(Number(group.field_1[0].field_2))
  }
  const footer = thrift_bytes(meta)
  const tail = new Uint8Array(8)
  new DataView(tail.buffer).setUint32(0, footer.length, true)
  tail.set([0x50, 0x41, 0x52, 0x31], 4)  // PAR1
  out.push(footer, tail)
  return Buffer.concat(out)
}

const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'))
for (const file of spec.files) {
  const columns = columns_of(read_documents(file.documents))
  let bytes = file.writer === 'hyparquet' ? write_hyparquet(file, columns)
    : write_parquet_wasm(file, columns)
  bytes = new Uint8Array(bytes)
  if (file.crc || file.bad_crc) bytes = add_crcs(bytes, !!file.bad_crc)
  fs.writeFileSync(file.path + '.tmp', bytes)
  fs.renameSync(file.path + '.tmp', file.path)
}
