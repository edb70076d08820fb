// The languages `language` may name: every ISO 639-1 code with its English
// name. A request may give the code ("fr"), a tag whose first part is one
// ("pt-BR", "zh_Hant"), or the English name in any letter case ("french").
// Names with a common short form list it after a semicolon; both are accepted,
// and the first is what the model is told.

const ISO_639_1 = `
aa Afar|ab Abkhazian|ae Avestan|af Afrikaans|ak Akan|am Amharic|an Aragonese|ar Arabic|as Assamese|av Avaric|
ay Aymara|az Azerbaijani|ba Bashkir|be Belarusian|bg Bulgarian|bi Bislama|bm Bambara|bn Bengali;Bangla|bo Tibetan|
br Breton|bs Bosnian|ca Catalan;Valencian|ce Chechen|ch Chamorro|co Corsican|cr Cree|cs Czech|cu Church Slavonic|
cv Chuvash|cy Welsh|da Danish|de German|dv Divehi;Maldivian|dz Dzongkha|ee Ewe|el Greek|en English|eo Esperanto|
es Spanish;Castilian|et Estonian|eu Basque|fa Persian;Farsi|ff Fulah|fi Finnish|fj Fijian|fo Faroese|fr French|
fy Western Frisian;Frisian|ga Irish|gd Scottish Gaelic;Gaelic|gl Galician|gn Guarani|gu Gujarati|gv Manx|ha Hausa|
he Hebrew|hi Hindi|ho Hiri Motu|hr Croatian|ht Haitian Creole;Haitian|hu Hungarian|hy Armenian|hz Herero|
ia Interlingua|id Indonesian|ie Interlingue|ig Igbo|ii Sichuan Yi|ik Inupiaq|io Ido|is Icelandic|it Italian|
iu Inuktitut|ja Japanese|jv Javanese|ka Georgian|kg Kongo|ki Kikuyu|kj Kuanyama|kk Kazakh|kl Greenlandic;Kalaallisut|
km Khmer|kn Kannada|ko Korean|kr Kanuri|ks Kashmiri|ku Kurdish|kv Komi|kw Cornish|ky Kyrgyz;Kirghiz|la Latin|
lb Luxembourgish|lg Ganda;Luganda|li Limburgish|ln Lingala|lo Lao|lt Lithuanian|lu Luba-Katanga|lv Latvian|
mg Malagasy|mh Marshallese|mi Maori|mk Macedonian|ml Malayalam|mn Mongolian|mr Marathi|ms Malay|mt Maltese|
my Burmese|na Nauru|nb Norwegian Bokmal;Bokmal|nd North Ndebele|ne Nepali|ng Ndonga|nl Dutch;Flemish|
nn Norwegian Nynorsk;Nynorsk|no Norwegian|nr South Ndebele|nv Navajo|ny Chichewa;Nyanja|oc Occitan|oj Ojibwa|
om Oromo|or Odia;Oriya|os Ossetian|pa Punjabi;Panjabi|pi Pali|pl Polish|ps Pashto|pt Portuguese|qu Quechua|
rm Romansh|rn Kirundi;Rundi|ro Romanian;Moldovan|ru Russian|rw Kinyarwanda|sa Sanskrit|sc Sardinian|sd Sindhi|
se Northern Sami|sg Sango|si Sinhala;Sinhalese|sk Slovak|sl Slovenian;Slovene|sm Samoan|sn Shona|so Somali|
sq Albanian|sr Serbian|ss Swati|st Southern Sotho;Sesotho|su Sundanese|sv Swedish|sw Swahili|ta Tamil|te Telugu|
tg Tajik|th Thai|ti Tigrinya|tk Turkmen|tl Tagalog;Filipino|tn Tswana|to Tongan|tr Turkish|ts Tsonga|tt Tatar|
tw Twi|ty Tahitian|ug Uyghur;Uighur|uk Ukrainian|ur Urdu|uz Uzbek|ve Venda|vi Vietnamese|vo Volapuk|wa Walloon|
wo Wolof|xh Xhosa|yi Yiddish|yo Yoruba|za Zhuang|zh Chinese|zu Zulu`

/** English name by ISO 639-1 code. */
export const LANGUAGE_BY_CODE: ReadonlyMap<string, string> = new Map()
/** English name by any accepted name, lower-cased. */
const LANGUAGE_BY_NAME = new Map<string, string>()

for (const entry of ISO_639_1.replaceAll('\n', '').split('|')) {
  const space = entry.indexOf(' ')
  const code = entry.slice(0, space)
  const names = entry.slice(space + 1).split(';')
  ;(LANGUAGE_BY_CODE as Map<string, string>).set(code, names[0])
  for (const name of names) LANGUAGE_BY_NAME.set(name.toLowerCase(), names[0])
}

/** The English name of the language `value` names, or undefined when it names none. */
export function resolveLanguage (value: string): string | undefined {
  const text = value.trim().replace(/\s+/g, ' ')
  const byName = LANGUAGE_BY_NAME.get(text.toLowerCase())
  if (byName !== undefined) return byName
  // A code, or a BCP 47 / POSIX tag whose primary subtag is one: "pt-BR", "zh_Hant".
  const tag = /^([A-Za-z]{2})(?:[-_][A-Za-z0-9]{1,8})*$/.exec(text)
  return tag ? LANGUAGE_BY_CODE.get(tag[1].toLowerCase()) : undefined
}
